// The peer life-cycle loop that judges a UCX memory-hook setting in Node (docs/binding.md, "UCX
// memory events"): each run is a fresh process that, `cycles` times, starts a peer process,
// connects, echoes 8 KiB, closes the endpoint and SIGKILLs the peer. A run fails on any error, on
// a peer that dies of anything but our SIGKILL, or on a cycle that takes over 30 s (a hang).
// With --cuda the peer echoes through GPU 0 memory it allocates and frees each cycle, so UCX's
// CUDA memory hooks (where a setting installs them) see allocations and frees.
//   node --import tsx scripts/ucx-hooks-loop.ts [--runs 10] [--cycles 40] [--cuda] [VAR=value ...]
// The VAR=value settings go into the environment of every process of every run. Exit status 0
// when no run failed, 1 otherwise.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Context, Endpoint, Worker } from '../core/ucx/index.ts';
import { NativePeer } from '../test/native/fixture.ts';

const CYCLE_LIMIT_MS = 30_000;
const EXACT = (1n << 64n) - 1n;

function within<T>(ms: number, what: string, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error(`${what}: no answer in ${ms} ms (hang)`)), ms); });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

/** One run: `cycles` peer lives in this process. Throws on the first failure. */
async function runCycles(cycles: number, echo: 'echo' | 'echoCuda'): Promise<void> {
  const context = Context.create();
  const worker = Worker.create(context);
  try {
    for (let i = 0; i < cycles; i += 1) {
      await within(CYCLE_LIMIT_MS, `cycle ${i}`, (async () => {
        const peer = await NativePeer.start({});
        const died = peer.peer.exited.then((exit) => exit);
        try {
          const ep = Endpoint.connect(worker, { host: '127.0.0.1', port: peer.port });
          await ep.flush();
          const tag = 0x7000n + BigInt(i);
          const src = new Uint8Array(8192).fill(i & 0xff);
          const dst = new Uint8Array(8192);
          const echoed = peer.call(echo, { tag: String(tag), size: src.byteLength });
          await peer.event('posted');
          const back = worker.tagRecv(dst, tag + 1n, EXACT);
          await ep.tagSend(tag, src);
          await back;
          await echoed;
          if (Buffer.compare(Buffer.from(dst), Buffer.from(src)) !== 0) throw new Error(`cycle ${i}: echoed bytes differ`);
          await ep.close();
        } finally {
          const exit = await peer.kill();
          await died;
          if (exit.signal !== 'SIGKILL') throw new Error(`cycle ${i}: peer ended by ${exit.signal ?? `exit ${exit.code}`}, not our SIGKILL`);
        }
      })());
    }
  } finally {
    await worker.close();
    context.close();
  }
}

const args = process.argv.slice(2);
if (args[0] === '--child') {
  runCycles(Number(args[1]), args[2] === 'cuda' ? 'echoCuda' : 'echo').then(() => process.exit(0), (error: unknown) => {
    console.error(String(error instanceof Error ? error.message : error));
    process.exit(1);
  });
} else {
  let runs = 10;
  let cycles = 40;
  let echo = 'host';
  const env: Record<string, string> = {};
  for (let i = 0; i < args.length; i += 1) {
    const arg = args[i]!;
    if (arg === '--cuda') {
      echo = 'cuda';
    } else if (arg === '--runs' || arg === '--cycles') {
      const n = Number(args[++i]);
      if (!Number.isInteger(n) || n < 1) throw new Error(`${arg} takes a positive integer`);
      if (arg === '--runs') runs = n; else cycles = n;
    } else if (/^[A-Z_][A-Z0-9_]*=/.test(arg)) {
      const at = arg.indexOf('=');
      env[arg.slice(0, at)] = arg.slice(at + 1);
    } else {
      throw new Error(`usage: scripts/ucx-hooks-loop.ts [--runs N] [--cycles N] [--cuda] [VAR=value ...] (got ${arg})`);
    }
  }
  const self = fileURLToPath(import.meta.url);
  let failed = 0;
  for (let run = 0; run < runs; run += 1) {
    const started = Date.now();
    const child = spawnSync(process.execPath, ['--import', 'tsx', self, '--child', String(cycles), echo], {
      env: { ...process.env, ...env }, encoding: 'utf8', timeout: cycles * CYCLE_LIMIT_MS + 60_000,
    });
    const ok = child.status === 0;
    if (!ok) failed += 1;
    const why = ok ? '' : ` FAILED (${child.signal ?? `exit ${child.status}`}): ${(child.stderr ?? '').trim().split('\n').slice(-3).join(' | ')}`;
    console.log(`run ${run + 1}/${runs}: ${cycles} cycles, ${((Date.now() - started) / 1000).toFixed(1)} s${why}`);
  }
  console.log(`${JSON.stringify(env)}, ${echo} echo: ${failed} of ${runs} runs with a failure`);
  process.exit(failed === 0 ? 0 : 1);
}
