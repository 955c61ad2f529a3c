// Describes the machine a benchmark ran on, for the results JSON.
import { cpus, totalmem, release, hostname } from 'node:os';
import { execFileSync } from 'node:child_process';

export interface MachineInfo {
  cpu: string;
  cores: number;
  memoryGiB: number;
  kernel: string;
  node: string;
  host: string;
  gpus: string[];
  date: string;
  gdrpc_code: 'dist' | 'sources (tsx)';
}

function gpuNames(): string[] {
  try {
    const out = execFileSync('nvidia-smi', ['--query-gpu=name,driver_version', '--format=csv,noheader'],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 10_000 });
    return out.trim().split('\n').filter(Boolean);
  } catch {
    return [];
  }
}

/** What a reader needs to weigh the numbers: CPU, cores, memory, GPUs, versions, when. */
export function describeMachine(): MachineInfo {
  return {
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    kernel: release(),
    node: process.version,
    host: hostname(),
    gpus: gpuNames(),
    date: new Date().toISOString(),
    // Which gdrpc ran: the compiled package (bench/on-dist.mjs, what `npm run bench` uses) or the
    // TypeScript sources through tsx.
    gdrpc_code: import.meta.resolve('../core/index.ts').includes('/dist/') ? 'dist' : 'sources (tsx)',
  };
}

/** One row of a results file; every benchmark writes this shape. */
export interface BenchResult {
  system: string;
  workload: string;
  bytes: number;
  p50_us: number | null;
  p99_us: number | null;
  ops_per_s: number | null;
  gbps: number | null;
  [extra: string]: unknown;
}

/** Percentile of already sorted samples (nearest rank). */
export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

/** The positive integer after `name` in a suite's flags (`--rounds 3`), or `fallback` without it. */
export function positiveFlag(flags: string[], name: string, fallback: number): number {
  const at = flags.indexOf(name);
  if (at < 0) return fallback;
  const value = Number(flags[at + 1]);
  if (!Number.isInteger(value) || value <= 0) throw new Error(`${name} takes a positive integer`);
  return value;
}
