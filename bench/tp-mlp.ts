// `npm run bench -- tp-mlp [--shards N] [--batch B] [--model M] [--hidden H] [--layers L] [--steps S]`:
// the tensor-parallel MLP of examples/tensor-parallel.ts (shards computing on their GPUs and
// all-reducing with gdrpc) next to the same step in PyTorch with NCCL all_reduce
// (bench/nccl_tp_mlp.py), run back to back on the same machine.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describeMachine } from './machine.ts';
import { run } from './process.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const LIMIT_MS = 300_000;

/** Example flags from the suite's (each `--name value`), with the issue's size as the default on a GPU. */
function exampleFlags(flags: string[]): Record<string, string> {
  const values: Record<string, string> = { shards: '2', batch: '8', model: '4096', hidden: '16384', layers: '4', steps: '20' };
  for (let i = 0; i < flags.length; i += 2) {
    const name = flags[i]!.replace(/^--/, '');
    if (!(name in values) || flags[i + 1] === undefined) throw new Error(`tp-mlp: unknown flag ${flags[i]} (known: ${Object.keys(values).map((k) => `--${k}`).join(' ')})`);
    values[name] = flags[i + 1]!;
  }
  return values;
}

export async function runTpMlpBench(opts: { json?: string; flags: string[] }): Promise<object> {
  const values = exampleFlags(opts.flags);
  const args = Object.entries(values).flatMap(([k, v]) => [`--${k}`, v]);
  const dir = mkdtempSync(join(tmpdir(), 'gdrpc-tp-'));
  try {
    const out = join(dir, 'gdrpc.json');
    const example = await run(process.execPath, ['--import', 'tsx', join(root, 'examples/tensor-parallel.ts'), ...args, '--json', out], { limitMs: LIMIT_MS, cwd: root });
    console.log(example.stdout.trim());
    if (example.code !== 0) console.error(`tensor-parallel example failed (exit ${example.code}): ${example.stderr.slice(-1500)}`);
    const gdrpc = example.code === 0 ? JSON.parse(readFileSync(out, 'utf8')) as object : { failed: `exit ${example.code}`, stderr: example.stderr.slice(-1500) };
    const python = process.env.GDRPC_PYTHON ?? 'python3';
    const torch = await run(python, [join(root, 'bench/nccl_tp_mlp.py'), ...args], { limitMs: LIMIT_MS, cwd: root });
    const line = torch.stdout.trim().split('\n').reverse().find((l) => l.startsWith('{'));
    const reference = line !== undefined ? JSON.parse(line) as object : { failed: `exit ${torch.code}`, stderr: torch.stderr.slice(-1500) };
    console.log(`pytorch+nccl: ${JSON.stringify(reference)}`);
    return {
      machine: describeMachine(),
      what: 'examples/tensor-parallel.ts (gdrpc) and bench/nccl_tp_mlp.py (PyTorch + NCCL) back to back: one tensor-parallel MLP step, and the all-reduce alone',
      gdrpc, reference,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
