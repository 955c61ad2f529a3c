// A V8 CPU profile of a whole process, for the benchmarks' processes on machines where
// `--cpu-prof` cannot be passed (NODE_OPTIONS refuses it): `NODE_OPTIONS=--import=<this file>`
// with GDRPC_CPU_PROFILE_DIR set writes <dir>/<pid>.cpuprofile when the process exits or is told
// to stop (SIGTERM, SIGINT), children included. bench/profile-top.ts reads them.
import { Session } from 'node:inspector';
import { mkdirSync, writeFileSync } from 'node:fs';

const dir = process.env.GDRPC_CPU_PROFILE_DIR;
if (dir !== undefined && dir !== '') {
  mkdirSync(dir, { recursive: true });
  const session = new Session();
  session.connect();
  session.post('Profiler.enable');
  // 100 µs between samples: calls take tens of microseconds.
  session.post('Profiler.setSamplingInterval', { interval: 100 });
  session.post('Profiler.start');
  let written = false;
  const write = () => {
    if (written) return;
    written = true;
    // The in-process session answers synchronously.
    session.post('Profiler.stop', (error, result) => {
      if (error === null && result?.profile !== undefined) writeFileSync(`${dir}/${process.pid}.cpuprofile`, JSON.stringify(result.profile));
    });
  };
  process.on('exit', write);
  for (const signal of ['SIGTERM', 'SIGINT']) {
    process.once(signal, () => {
      write();
      process.exit(128 + (signal === 'SIGTERM' ? 15 : 2));
    });
  }
}
