// `npm run bench -- mem-events [--rounds R] --json <file>`: gdrpc's CUDA tensor calls and the
// tensor-parallel MLP's all-reduce under each UCX memory-event setting gdrpc could ship
// (docs/binding.md, "UCX memory events"). UCX reads these variables once, when the library loads,
// so every measurement runs in a fresh process with the setting in its environment (and its peer
// inherits it); the settings alternate round by round in one run, so the machine's drift hits
// all alike.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cuda } from '../core/cuda.ts';
import type { Device } from '../core/index.ts';
import { runGdrpc } from './gpu-gdrpc.ts';
import { describeMachine, type BenchResult } from './machine.ts';
import { run } from './process.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const KiB = 1024;
const MiB = 1024 * KiB;

/** The settings compared; `env` is added to the environment of the measuring process. */
export const MEM_EVENT_SETTINGS: Array<{ name: string; env: Record<string, string> }> = [
  { name: 'events off', env: { UCX_MEM_EVENTS: 'no' } },
  { name: 'events on, CUDA hooks only', env: { UCX_MEM_EVENTS: 'yes', UCX_MEM_MMAP_HOOK_MODE: 'none', UCX_MEM_MALLOC_HOOKS: 'n' } },
];

interface TpRun { all_reduce_ms_median?: number; all_reduces_per_step?: number; paths?: string[] }

/** One measuring process: the calls, written as JSON to `file`. */
async function child(file: string): Promise<object> {
  const gpus = cuda.available() ? cuda.deviceCount() : 0;
  const client: Device = gpus > 0 ? 'cuda:0' : 'cpu';
  const server: Device = gpus > 1 ? 'cuda:1' : client;
  const rows = await runGdrpc({ client, server, sizes: [64 * KiB, MiB, 16 * MiB], system: 'gdrpc', smallCalls: 2000 }, (line) => console.log(line));
  writeFileSync(file, JSON.stringify(rows));
  return {};
}

async function measure(dir: string, round: number, setting: (typeof MEM_EVENT_SETTINGS)[number]): Promise<{ calls: BenchResult[] | { failed: string }; tp: TpRun | { failed: string } }> {
  const tag = `${round}-${setting.name.replace(/\W+/g, '-')}`;
  const env = { ...process.env, ...setting.env };
  const callsFile = join(dir, `calls-${tag}.json`);
  const called = await run(process.execPath, ['--import', 'tsx', join(root, 'bench/main.ts'), 'mem-events', '--child', callsFile], { limitMs: 180_000, cwd: root, env });
  process.stdout.write(called.stdout);
  const calls = called.code === 0 ? JSON.parse(readFileSync(callsFile, 'utf8')) as BenchResult[] : { failed: `exit ${called.code}: ${called.stderr.slice(-800)}` };
  const tpFile = join(dir, `tp-${tag}.json`);
  const example = await run(process.execPath, ['--import', 'tsx', join(root, 'examples/tensor-parallel.ts'), '--json', tpFile], { limitMs: 180_000, cwd: root, env });
  const tp = example.code === 0 ? JSON.parse(readFileSync(tpFile, 'utf8')) as TpRun : { failed: `exit ${example.code}: ${example.stderr.slice(-800)}` };
  return { calls, tp };
}

export async function runMemEventsBench(opts: { json?: string; flags: string[] }): Promise<object> {
  const childAt = opts.flags.indexOf('--child');
  if (childAt >= 0) return child(opts.flags[childAt + 1]!);
  const roundsAt = opts.flags.indexOf('--rounds');
  const rounds = roundsAt >= 0 ? Number(opts.flags[roundsAt + 1]) : 2;
  if (!Number.isInteger(rounds) || rounds < 1) throw new Error('--rounds takes a positive integer');
  const dir = mkdtempSync(join(tmpdir(), 'gdrpc-mem-events-'));
  const results: Array<{ setting: string; env: Record<string, string>; round: number; calls: unknown; tensor_parallel: unknown }> = [];
  try {
    for (let round = 0; round < rounds; round += 1) {
      for (const setting of MEM_EVENT_SETTINGS) {
        const { calls, tp } = await measure(dir, round, setting);
        results.push({ setting: setting.name, env: setting.env, round, calls, tensor_parallel: tp });
        const rows = Array.isArray(calls) ? calls.map((r) => `${r.workload} ${r.bytes} B ${r.p50_us?.toFixed(1)} us`).join(', ') : JSON.stringify(calls);
        const reduce = 'all_reduce_ms_median' in tp && tp.all_reduce_ms_median !== undefined
          ? `${((tp.all_reduce_ms_median * 1000) / (tp.all_reduces_per_step ?? 1)).toFixed(1)} us per all-reduce` : JSON.stringify(tp);
        console.log(`round ${round}, ${setting.name}: ${rows}; tensor-parallel ${reduce}`);
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return {
    machine: describeMachine(),
    what: `gdrpc CUDA tensor calls (p50 per call, one in flight) and the tensor-parallel MLP under UCX memory-event settings, alternating over ${rounds} rounds, each in a fresh process`,
    results,
  };
}
