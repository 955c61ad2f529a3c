// `npm run bench -- wake-spin [--rounds R] --json <file>`: the worker's in-place spin while UCX
// stays BUSY with nothing to progress (docs/binding.md, GDRPC_STUCK_SPIN_US) against sleeping
// 1 ms at once, on the workloads that wait on CUDA copies: CUDA tensor calls between two
// processes (cuda:0 -> cuda:1 when there are two GPUs) and the tensor-parallel MLP's all-reduce.
// The settings alternate round by round in one run, so the machine's drift hits both alike.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
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
/** GDRPC_STUCK_SPIN_US per setting: the spin off, and the built-in default (the variable unset). */
const SETTINGS: Array<{ name: string; spinUs: string | undefined }> = [{ name: 'sleep at once', spinUs: '0' }, { name: 'spin (default)', spinUs: undefined }];

interface TpRun { all_reduce_ms_median?: number; all_reduces_per_step?: number; shard_run_ms_median?: number; compute_ms_median?: number; paths?: string[] }

function withSpin<T>(spinUs: string | undefined, body: () => Promise<T>): Promise<T> {
  const before = process.env.GDRPC_STUCK_SPIN_US;
  if (spinUs === undefined) delete process.env.GDRPC_STUCK_SPIN_US;
  else process.env.GDRPC_STUCK_SPIN_US = spinUs;
  // Workers read it when they are made: this process's runtime and the peers it spawns alike.
  return body().finally(() => {
    if (before === undefined) delete process.env.GDRPC_STUCK_SPIN_US;
    else process.env.GDRPC_STUCK_SPIN_US = before;
  });
}

async function tensorParallel(dir: string, round: number, name: string): Promise<TpRun | { failed: string }> {
  const out = join(dir, `tp-${round}-${name.replace(/\W+/g, '-')}.json`);
  const example = await run(process.execPath, ['--import', 'tsx', join(root, 'examples/tensor-parallel.ts'), '--json', out], { limitMs: 180_000, cwd: root, env: process.env });
  if (example.code !== 0) return { failed: `exit ${example.code}: ${example.stderr.slice(-800)}` };
  return JSON.parse(readFileSync(out, 'utf8')) as TpRun;
}

export async function runWakeSpinBench(opts: { json?: string; flags: string[] }): Promise<object> {
  const roundsAt = opts.flags.indexOf('--rounds');
  const rounds = roundsAt >= 0 ? Number(opts.flags[roundsAt + 1]) : 3;
  if (!Number.isInteger(rounds) || rounds < 1) throw new Error('--rounds takes a positive integer');
  const gpus = cuda.available() ? cuda.deviceCount() : 0;
  const client: Device = gpus > 0 ? 'cuda:0' : 'cpu';
  const server: Device = gpus > 1 ? 'cuda:1' : client;
  const dir = mkdtempSync(join(tmpdir(), 'gdrpc-wake-'));
  const calls: Array<BenchResult & { setting: string; round: number }> = [];
  const tp: Array<{ setting: string; round: number; run: TpRun | { failed: string } }> = [];
  try {
    for (let round = 0; round < rounds; round += 1) {
      for (const setting of SETTINGS) {
        await withSpin(setting.spinUs, async () => {
          const rows = await runGdrpc({ client, server, sizes: [64 * KiB, MiB, 16 * MiB], system: `gdrpc, ${setting.name}`, smallCalls: 2000 }, (line) => console.log(line));
          calls.push(...rows.map((r) => ({ ...r, setting: setting.name, round })));
          const result = await tensorParallel(dir, round, setting.name);
          tp.push({ setting: setting.name, round, run: result });
          const reduce = 'all_reduce_ms_median' in result && result.all_reduce_ms_median !== undefined
            ? `${((result.all_reduce_ms_median * 1000) / (result.all_reduces_per_step ?? 1)).toFixed(1)} us per all-reduce` : JSON.stringify(result);
          console.log(`round ${round}, ${setting.name}: tensor-parallel ${reduce}`);
        });
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return {
    machine: describeMachine(),
    what: `CUDA tensor calls ${client} -> ${server} and the tensor-parallel MLP, GDRPC_STUCK_SPIN_US=0 against the default, alternating over ${rounds} rounds`,
    calls, tensor_parallel: tp,
  };
}
