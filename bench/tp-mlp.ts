// `npm run bench -- tp-mlp [--shards N] [--batch B] [--model M] [--hidden H] [--layers L] [--steps S]`:
// the tensor-parallel MLP of examples/tensor-parallel.ts (shards computing on their GPUs and
// all-reducing with gdrpc) next to the same step in PyTorch with NCCL all_reduce
// (bench/nccl_tp_mlp.py), run back to back on the same machine.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describeMachine } from './machine.ts';
import { run } from './process.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const LIMIT_MS = 300_000;
const WHAT = 'examples/tensor-parallel.ts (gdrpc) and bench/nccl_tp_mlp.py (PyTorch + NCCL) back to back: one tensor-parallel MLP step, and the all-reduce alone';

/** The sizes the example ran with (its own defaults where no flag said), for the reference. */
const SIZES = ['shards', 'batch', 'model', 'hidden', 'layers', 'steps'] as const;

export async function runTpMlpBench(opts: { json?: string; flags: string[] }): Promise<object> {
  const dir = mkdtempSync(join(tmpdir(), 'gdrpc-tp-'));
  try {
    const out = join(dir, 'gdrpc.json');
    // The example checks the flags and picks the sizes (the on a GPU, small ones on the host).
    const example = await run(process.execPath, ['--import', 'tsx', join(root, 'examples/tensor-parallel.ts'), ...opts.flags, '--json', out], { limitMs: LIMIT_MS, cwd: root });
    console.log(example.stdout.trim());
    if (example.code !== 0) {
      console.error(`tensor-parallel example failed (exit ${example.code}): ${example.stderr.slice(-1500)}`);
      return { machine: describeMachine(), what: WHAT, gdrpc: { failed: `exit ${example.code}`, stderr: example.stderr.slice(-1500) }, reference: { skipped: 'the example failed' } };
    }
    const gdrpc = JSON.parse(readFileSync(out, 'utf8')) as GdrpcRun & Record<(typeof SIZES)[number], number>;
    const python = process.env.GDRPC_PYTHON ?? 'python3';
    const torch = await run(python, [join(root, 'bench/nccl_tp_mlp.py'), ...SIZES.flatMap((k) => [`--${k}`, String(gdrpc[k])])], { limitMs: LIMIT_MS, cwd: root });
    const line = torch.stdout.trim().split('\n').reverse().find((l) => l.startsWith('{'));
    const reference = line !== undefined ? JSON.parse(line) as object : { failed: `exit ${torch.code}`, stderr: torch.stderr.slice(-1500) };
    console.log(`pytorch+nccl: ${JSON.stringify(reference)}`);
    if (opts.json !== undefined) writeFileSync(opts.json.replace(/\.json$/, '') + '.svg', renderTpChart(gdrpc, reference as TorchRun));
    return { machine: describeMachine(), what: WHAT, gdrpc, reference };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

interface GdrpcRun { shard_run_ms_median?: number; compute_ms_median?: number; all_reduce_ms_median?: number; all_reduces_per_step?: number; devices?: string[] }
interface TorchRun { step_us_median?: number; matmul_up_us_median?: number; matmul_down_us_median?: number; all_reduce_us_median?: number; layers?: number }

/** Bars of microseconds, gdrpc against PyTorch + NCCL: a shard's whole step, its matrix products,
 *  one all-reduce. Missing numbers are left out. */
export function renderTpChart(gdrpc: GdrpcRun, torch: TorchRun): string {
  const layers = torch.layers ?? gdrpc.all_reduces_per_step ?? 1;
  const us = (ms: number | undefined): number | undefined => (ms === undefined ? undefined : ms * 1000);
  const groups: Array<[string, number | undefined, number | undefined]> = [
    ['step on one shard', us(gdrpc.shard_run_ms_median), torch.step_us_median],
    ['matrix products per step', us(gdrpc.compute_ms_median),
      torch.matmul_up_us_median !== undefined && torch.matmul_down_us_median !== undefined ? (torch.matmul_up_us_median + torch.matmul_down_us_median) * layers : undefined],
    ['one all-reduce', gdrpc.all_reduce_ms_median !== undefined ? (gdrpc.all_reduce_ms_median * 1000) / (gdrpc.all_reduces_per_step ?? 1) : undefined, torch.all_reduce_us_median],
  ];
  const max = Math.max(1, ...groups.flatMap(([, a, b]) => [a ?? 0, b ?? 0]));
  const [left, width, row] = [190, 520, 64];
  const bar = (y: number, value: number | undefined, color: string, label: string): string => (value === undefined ? '' :
    `<rect x="${left}" y="${y}" width="${Math.max(1, (value / max) * width).toFixed(1)}" height="20" fill="${color}"/>`
    + `<text x="${left + Math.max(1, (value / max) * width) + 6}" y="${y + 15}" font-size="12">${label} ${value.toFixed(0)} us</text>`);
  const body = groups.map(([name, a, b], i) => {
    const y = 50 + i * row;
    return `<text x="${left - 8}" y="${y + 26}" font-size="13" text-anchor="end">${name}</text>${bar(y, a, '#1f77b4', 'gdrpc')}${bar(y + 22, b, '#d62728', 'PyTorch+NCCL')}`;
  }).join('');
  const title = `Tensor-parallel MLP step (${gdrpc.devices?.join(', ') ?? '?'}): gdrpc vs PyTorch + NCCL, microseconds (median)`;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="900" height="${70 + groups.length * row}" font-family="sans-serif">`
    + `<text x="10" y="24" font-size="15">${title}</text>${body}</svg>\n`;
}
