// bench/ucx-call.c beside gdrpc: a call's wire steps in C over the same UCX with gdrpc's settings,
// with busy-polling workers (the floor under gdrpc's call) or sleeping ones. Built here against the UCX the addon
// was built with, or taken from GDRPC_UCX_CALL (the GPU machine has no UCX headers:
// scripts/gpu-pack.sh builds it); skipped with the reason where neither is possible.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BenchResult } from './machine.ts';
import { ucxHome, ucxProgramEnv } from './perftest.ts';
import { run } from './process.ts';

const root = fileURLToPath(new URL('..', import.meta.url));

/** Who sleeps on the worker's fd while waiting: nobody (both spin: the floor); the server while it
 *  waits for a REQUEST, spinning for the payload (an idle gdrpc server sleeps, and polls while a
 *  device transfer is in flight; a client with a call pending spins: gdrpc's default); or both,
 *  in every wait (gdrpc with busyPollUs 0). */
export type UcxCallWait = 'none' | 'server' | 'both';
/** How the client's endpoint is made: through the server's listener (as a gdrpc Client connects,
 *  the default) or from the server's worker address. */
export type UcxCallConnect = 'listener' | 'address';
const WAIT_WORDS: Record<UcxCallWait, string> = { none: 'busy-poll', server: 'server sleeps', both: 'both sleep' };

/** The system name of rows made with `wait` and `connect` (and shared memory between the two
 *  processes, as trusted gdrpc peers may choose), e.g. "ucx-call (C, busy-poll)". */
export function ucxCallSystem(wait: UcxCallWait, connect: UcxCallConnect = 'listener', sharedMemory = false): string {
  return `ucx-call (C, ${WAIT_WORDS[wait]}${connect === 'address' ? ', worker address' : ''}${sharedMemory ? ', shared memory' : ''})`;
}

/** The program built in this process, once, in a private folder of its own. */
let built: Promise<{ bin: string } | { reason: string }> | undefined;
let builtDir: string | undefined;

/** Removes the program this process built, if any (at exit; a test runner whose workers end
 *  without an exit event calls it itself, or every worker leaves its folder behind). */
export function removeUcxCallProgram(): void {
  if (builtDir !== undefined) rmSync(builtDir, { recursive: true, force: true });
  builtDir = undefined;
  built = undefined;
}

/** The program to run, or why there is none. */
export function ucxCallProgram(home: string): Promise<{ bin: string } | { reason: string }> {
  const given = process.env.GDRPC_UCX_CALL;
  if (given) return Promise.resolve(existsSync(given) ? { bin: given } : { reason: `GDRPC_UCX_CALL names ${given}, which does not exist` });
  if (!existsSync(join(home, 'include/ucp/api/ucp.h'))) return Promise.resolve({ reason: `no UCX headers under ${home}/include to build bench/ucx-call.c` });
  built ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gdrpc-ucx-call-'));
    if (builtDir === undefined) process.once('exit', removeUcxCallProgram);
    builtDir = dir;
    const bin = join(dir, 'ucx-call');
    const cc = await run('bash', [join(root, 'scripts/build-bench-c.sh'), 'ucx-call', bin, home], { limitMs: 120_000 });
    return cc.code === 0 ? { bin } : { reason: `building bench/ucx-call.c failed: ${cc.stderr.slice(-500)}` };
  })();
  return built;
}

/** One row per line "<memory> <bytes> bytes: call p50 X us p99 Y [| server receive step p50 Z us p99 W]
 *  | cpu per round client C us server S us (N rounds)". */
export function parseUcxCall(output: string, memory: 'host' | 'cuda', wait: UcxCallWait = 'none', connect: UcxCallConnect = 'listener', sharedMemory = false): BenchResult[] {
  const rows: BenchResult[] = [];
  const line = /^(host|cuda)\s+(\d+) bytes: call p50\s+([\d.]+) us p99\s+([\d.]+)(?: \| server receive step p50\s+([\d.]+) us p99\s+([\d.]+))? \| cpu per round client ([\d.]+) us server ([\d.]+) us \((\d+) rounds\)/;
  for (const text of output.split('\n')) {
    const m = line.exec(text.trim());
    if (!m) continue;
    const bytes = Number(m[2]);
    const p50 = Number(m[3]);
    rows.push({
      system: ucxCallSystem(wait, connect, sharedMemory), workload: bytes === 0 ? 'small_call_rtt' : 'tensor_arg/tag', bytes,
      p50_us: p50, p99_us: Number(m[4]), ops_per_s: 1e6 / p50, gbps: bytes === 0 ? null : bytes / p50 / 1e3, memory, iterations: Number(m[9]),
      client_cpu_us: Number(m[7]), server_cpu_us: Number(m[8]),
      ...(m[5] !== undefined ? { receive_p50_us: Number(m[5]), receive_p99_us: Number(m[6]) } : {}),
    });
  }
  return rows;
}

/** Runs bench/ucx-call.c on `memory` over `sizes` (0: the small call without a payload); `rounds`
 *  measured rounds per size instead of the program's own count. */
export async function runUcxCall(memory: 'host' | 'cuda', sizes: number[], log: (line: string) => void,
  options: { rounds?: number; wait?: UcxCallWait; connect?: UcxCallConnect; limitMs?: number; sharedMemory?: boolean } = {}): Promise<{ results: BenchResult[]; skipped: { system: string; reason: string }[] }> {
  const { rounds, wait = 'none', connect = 'listener', limitMs = 300_000, sharedMemory = false } = options;
  const system = ucxCallSystem(wait, connect, sharedMemory);
  const home = ucxHome();
  const skip = (reason: string) => ({ results: [], skipped: [{ system, reason }] });
  if (home === undefined) return skip('no UCX install found (build/gdrpc-build.json ucxHome, .deps/python/libucx)');
  const found = await ucxCallProgram(home);
  if ('reason' in found) return skip(found.reason);
  const env = ucxProgramEnv(home, {
    GDRPC_UCX_CALL_WAIT: wait,
    GDRPC_UCX_CALL_CONNECT: connect,
    ...(rounds !== undefined ? { GDRPC_UCX_CALL_ROUNDS: String(rounds) } : {}),
    // Its endpoints are in PEER error mode, as gdrpc's are: shared memory only with y (set either
    // way, so that an inherited variable cannot move a TCP row onto shared memory).
    UCX_MM_ERROR_HANDLING: sharedMemory ? 'y' : 'n',
  });
  const finished = await run(found.bin, [memory, ...sizes.map(String)], { env, limitMs });
  if (finished.timedOut || finished.code !== 0) {
    return skip(`${finished.timedOut ? 'timed out' : `exit ${finished.code}`}: ${(finished.stderr || finished.stdout).slice(-500)}`);
  }
  const results = parseUcxCall(finished.stdout, memory, wait, connect, sharedMemory);
  for (const r of results) {
    log(`${system}: ${r.workload} ${r.bytes} B p50 ${r.p50_us!.toFixed(1)} us` +
      (r.receive_p50_us !== undefined ? ` (server receive step ${(r.receive_p50_us as number).toFixed(1)} us)` : ''));
  }
  if (results.length !== sizes.length) return { results, skipped: [{ system, reason: `${results.length} rows for ${sizes.length} sizes:\n${finished.stdout.slice(-500)}` }] };
  return { results, skipped: [] };
}
