// The baselines the GPU benchmark runs beside gdrpc: ucx_perftest with CUDA memory on the same
// UCX and settings, PyTorch RPC (TensorPipe, device maps) between two Python processes, and a raw
// device-to-device copy (the ceiling). Each is skipped with a reason when it cannot run here.
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BenchResult } from './machine.ts';
import { run } from './process.ts';
import { perftest, ucxHome } from './perftest.ts';

const root = fileURLToPath(new URL('..', import.meta.url));

/** A baseline that did not run, and why. */
export interface Skipped { system: string; reason: string }

/** ucx_perftest tag_lat (8 B) and tag_bw over `sizes`, memory `memory` at both ends, PEER error mode (-e) like gdrpc. */
export async function runPerftest(memory: 'cuda' | 'host', sizes: number[], itersFor: (size: number) => number,
  log: (line: string) => void): Promise<{ results: BenchResult[]; skipped: Skipped[] }> {
  const system = 'ucx_perftest';
  const home = ucxHome();
  if (home === undefined) return { results: [], skipped: [{ system, reason: 'ucx_perftest not found (build/gdrpc-build.json ucxHome, .deps/python/libucx)' }] };
  const results: BenchResult[] = [];
  const skipped: Skipped[] = [];
  const mem = ['-m', `${memory},${memory}`, '-e'];
  try {
    // tag_lat reports half a round trip: doubled to compare with a call's round trip.
    const p50 = (await perftest(home, ['-t', 'tag_lat', '-s', '8', '-n', '20000', '-w', '2000', '-R', '50', ...mem], 60_000))[1]! * 2;
    const p99 = (await perftest(home, ['-t', 'tag_lat', '-s', '8', '-n', '20000', '-w', '2000', '-R', '99', ...mem], 60_000))[1]! * 2;
    results.push({ system, workload: 'tag_rtt', bytes: 8, p50_us: p50, p99_us: p99, ops_per_s: 1e6 / p50, gbps: null, memory });
    log(`ucx_perftest: tag round trip p50 ${p50.toFixed(1)} us`);
  } catch (error) {
    skipped.push({ system: `${system} tag_lat`, reason: (error as Error).message.slice(0, 500) });
  }
  for (const size of sizes) {
    try {
      const iters = itersFor(size);
      const f = await perftest(home, ['-t', 'tag_bw', '-s', String(size), '-n', String(iters), '-w', String(Math.max(2, Math.round(iters / 10))), ...mem], 90_000);
      const gbps = (f[5]! * 2 ** 20) / 1e9;
      results.push({ system, workload: 'tag_bw', bytes: size, p50_us: f[1]!, p99_us: null, ops_per_s: f[7]!, gbps, memory, iterations: f[0]! });
      log(`ucx_perftest: tag_bw ${size} B ${gbps.toFixed(1)} GB/s`);
    } catch (error) {
      skipped.push({ system: `${system} tag_bw ${size}`, reason: (error as Error).message.slice(0, 500) });
    }
  }
  return { results, skipped };
}

/** Runs one of the Python baselines; it prints one JSON object {results: [...]} or {skipped: "..."}. */
export async function runPython(script: string, args: string[], system: string, limitMs: number,
  log: (line: string) => void): Promise<{ results: BenchResult[]; skipped: Skipped[] }> {
  const python = process.env.GDRPC_PYTHON ?? 'python3';
  const finished = await run(python, [join(root, 'bench', script), ...args], { env: process.env, limitMs });
  if (finished.timedOut) return { results: [], skipped: [{ system, reason: `timed out after ${limitMs / 1000} s: ${finished.stderr.slice(-500)}` }] };
  const line = finished.stdout.trim().split('\n').reverse().find((l) => l.startsWith('{'));
  if (finished.code !== 0 || line === undefined) {
    return { results: [], skipped: [{ system, reason: `exit ${finished.code}: ${(finished.stderr || finished.stdout).slice(-800)}` }] };
  }
  const parsed = JSON.parse(line) as { results?: BenchResult[]; skipped?: string };
  if (parsed.skipped !== undefined) return { results: [], skipped: [{ system, reason: parsed.skipped }] };
  for (const r of parsed.results ?? []) log(`${r.system}: ${r.workload} ${r.bytes} B p50 ${r.p50_us ?? '-'} us ${r.gbps ?? '-'} GB/s`);
  return { results: parsed.results ?? [], skipped: [] };
}
