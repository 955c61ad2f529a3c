// ucx_perftest, the UCX install's own benchmark, as the baseline beside the binding and gdrpc:
// found next to the UCX the addon was built against, run with gdrpc's UCX settings.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { UCX_DEFAULTS } from '../core/native.ts';
import { run, start, waitForOutput } from './process.ts';

const root = fileURLToPath(new URL('..', import.meta.url));

/** The UCX prefix whose ucx_perftest to run, or undefined when the install ships none. */
export function ucxHome(): string | undefined {
  try {
    const build = JSON.parse(readFileSync(join(root, 'build/gdrpc-build.json'), 'utf8')) as { ucxHome?: string };
    if (build.ucxHome && existsSync(join(build.ucxHome, 'bin/ucx_perftest'))) return build.ucxHome;
  } catch { /* fall through */ }
  const local = join(root, '.deps/python/libucx');
  return existsSync(join(local, 'bin/ucx_perftest')) ? local : undefined;
}

/** The environment gdrpc gives UCX (its defaults where the user set nothing), for a fair baseline. */
export function ucxEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extra };
  for (const [name, value] of Object.entries(UCX_DEFAULTS)) env[name] ??= value;
  return env;
}

/** ucxEnv for a program of the UCX install at `home` (ucx_perftest, bench/ucx-call.c): its lib
 *  folder first on LD_LIBRARY_PATH. */
export function ucxProgramEnv(home: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return ucxEnv({ ...extra, LD_LIBRARY_PATH: [join(home, 'lib'), process.env.LD_LIBRARY_PATH].filter(Boolean).join(':') });
}

let nextPort = 21000 + (process.pid % 10000);

/** One ucx_perftest run (server and client each bounded); its final numbers, see parseFinal. */
export async function perftest(home: string, args: string[], limitMs: number, extraEnv: Record<string, string> = {}): Promise<number[]> {
  const bin = join(home, 'bin/ucx_perftest');
  const env = ucxProgramEnv(home, extraEnv);
  const port = String(nextPort++);
  const server = start(bin, ['-p', port], { env, limitMs });
  try {
    // The server prints nothing reliable before a client connects on every version: give it a moment.
    await waitForOutput(server, /Waiting for connection/, 1500);
    const client = await run(bin, ['127.0.0.1', '-p', port, ...args, '-f'], { env, limitMs });
    if (client.timedOut) throw new Error(`ucx_perftest ${args.join(' ')} timed out`);
    return parseFinal(client.stdout + client.stderr, args);
  } finally {
    server.kill();
    await server.finished;
  }
}

/** With -f the final numbers are the last line made only of numbers: iterations, latency p-ile,
 *  average, overall (us), bandwidth average, overall (MB/s = MiB/s), message rate average, overall. */
export function parseFinal(output: string, args: string[] = []): number[] {
  const line = output.split('\n').reverse().find((l) => /^\s*(Final:)?\s*\d+(\s+[\d.]+){7}\s*$/.test(l));
  if (!line) throw new Error(`ucx_perftest ${args.join(' ')} gave no final line:\n${output.slice(-2000)}`);
  return line.replace('Final:', '').trim().split(/\s+/).map(Number);
}
