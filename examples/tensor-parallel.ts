// Tensor-parallel MLP over gdrpc: N shard workers (one process each, one GPU each where there are
// enough; examples/mlp-shard.ts) hold column slices of every up projection and row slices of every
// down projection, compute on their GPUs with gdrpc's kernels, and all-reduce their partial
// activations among themselves GPU to GPU (noStaging). Activations never leave GPU memory between
// layers. The coordinator sends the input, times each step, checks that every shard ends with the
// same output and, for sizes the host can afford, compares it with the same MLP computed on the
// host. Without a GPU the shards compute on the host with the kernels' host twins.
//   node --import tsx examples/tensor-parallel.ts [--shards 2] [--batch B] [--model M] [--hidden H]
//        [--layers L] [--steps S] [--check | --no-check] [--json file]
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Client, cuda, loadKernels, Tensor, fromHalf } from '../core/index.ts';
import { MlpShardClient, type MlpShape, type RunStats } from '../schemas/gen/mlp.ts';
import { layerPartial, makeLayer, serveMlpShard, sumInOrder } from './mlp-shard.ts';
import { role, startRole } from './peer.ts';

const GPU = cuda.available() && cuda.deviceCount() > 0;
/** The issue's size on a GPU; a small one on the host, where the shards' arithmetic is TypeScript. */
const DEFAULTS = GPU ? { batch: 8, model: 4096, hidden: 16384, layers: 4, steps: 20 } : { batch: 4, model: 128, hidden: 512, layers: 3, steps: 5 };
/** Multiply-adds per batch row below which the host reference runs by default. */
const HOST_CHECK_LIMIT = 2 ** 24;
const WARMUP_STEPS = 3;

function options(): { shards: number; shape: MlpShape; batch: number; steps: number; check: boolean; json?: string } {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      shards: { type: 'string', default: '2' }, batch: { type: 'string' }, model: { type: 'string' }, hidden: { type: 'string' },
      layers: { type: 'string' }, steps: { type: 'string' }, check: { type: 'boolean' }, 'no-check': { type: 'boolean' }, json: { type: 'string' },
    },
  });
  const int = (name: string, value: string | undefined, fallback: number): number => {
    const n = value === undefined ? fallback : Number(value);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer, got ${value}`);
    return n;
  };
  const shards = int('shards', values.shards, 2);
  const shape = { layers: int('layers', values.layers, DEFAULTS.layers), model: int('model', values.model, DEFAULTS.model), hidden: int('hidden', values.hidden, DEFAULTS.hidden), seed: 2026 };
  if (shape.hidden % shards !== 0) throw new Error(`--hidden ${shape.hidden} must be a multiple of --shards ${shards}`);
  const affordable = shape.model * shape.hidden * 2 * shape.layers <= HOST_CHECK_LIMIT;
  const check = values['no-check'] === true ? false : values.check === true || affordable;
  return { shards, shape, batch: int('batch', values.batch, DEFAULTS.batch), steps: int('steps', values.steps, DEFAULTS.steps), check, ...(values.json !== undefined ? { json: values.json } : {}) };
}

/** The same MLP in one piece on the host: every shard's slices, added in rank order. */
function hostReference(x: Tensor, shape: MlpShape, world: number): Tensor {
  const host = loadKernels('cpu');
  const batch = x.shape[0]!;
  let act = x;
  for (let l = 0; l < shape.layers; l += 1) {
    const parts = Array.from({ length: world }, (_, r) => {
      const partial = Tensor.zeros([batch, shape.model], 'f16');
      layerPartial(host, makeLayer(host, shape, world, r, l), act, Tensor.zeros([batch, shape.hidden / world], 'f16'), partial, r);
      return partial;
    });
    act = sumInOrder(host, parts, Tensor.zeros([batch, shape.model], 'f16'));
  }
  return act;
}

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

async function coordinator(): Promise<void> {
  const o = options();
  const file = fileURLToPath(import.meta.url);
  const addresses = await Promise.all(Array.from({ length: o.shards }, (_, r) => startRole(file, 'shard', [String(r)])));
  const clients = await Promise.all(addresses.map((address) => Client.connect(address, { poolBytes: 64 << 20 })));
  const shards = clients.map((client) => new MlpShardClient(client));
  const devices = (await Promise.all(shards.map((s, rank) => s.setup({ rank, worldSize: o.shards, peers: addresses, shape: o.shape }, { deadline: 120_000 })))).map((r) => r.device);

  const x = Tensor.zeros([o.batch, o.shape.model], 'f16');
  loadKernels('cpu').fill(x, { seed: 99 });
  const step = async (): Promise<{ ms: number; ys: Tensor[]; stats: RunStats[] }> => {
    const t0 = performance.now();
    const results = await Promise.all(shards.map((s) => s.run({ x }, { deadline: 120_000 })));
    return { ms: performance.now() - t0, ys: results.map((r) => r.y), stats: results.map((r) => r.stats) };
  };
  for (let i = 0; i < WARMUP_STEPS; i += 1) await step();
  const steps = [];
  for (let i = 0; i < o.steps; i += 1) steps.push(await step());
  const last = steps.at(-1)!;
  const identical = last.ys.every((y) => y.equals(last.ys[0]!));
  const reduceBytes = o.batch * o.shape.model * 2;

  const stepMs = steps.map((s) => s.ms);
  const compute = median(steps.map((s) => s.stats[0]!.computeMs));
  const reduce = median(steps.map((s) => s.stats[0]!.reduceMs));
  const shardRun = median(steps.map((s) => s.stats[0]!.totalMs));
  console.log(`tensor-parallel MLP: ${o.shards} shards on ${devices.join(', ')}; batch ${o.batch}, model ${o.shape.model}, hidden ${o.shape.hidden}, ${o.shape.layers} layers, f16`);
  console.log(`step ${median(stepMs).toFixed(3)} ms median (${Math.min(...stepMs).toFixed(3)}-${Math.max(...stepMs).toFixed(3)}) over ${o.steps} steps (rank 0's run ${shardRun.toFixed(3)} ms); on rank 0 per step: compute ${compute.toFixed(3)} ms, all-reduce ${reduce.toFixed(3)} ms (${o.shape.layers} all-reduces of ${reduceBytes} bytes per shard)`);
  console.log(`all-reduce paths from rank 0 (last layer): ${last.stats[0]!.paths.join('; ') || 'none (one shard)'}`);
  console.log(`outputs identical on every shard: ${identical}`);
  let reference: { maxError: number; relative: number } | undefined;
  if (o.check) {
    const want = Array.from(hostReference(x, o.shape, o.shards).toArray() as Uint16Array, fromHalf);
    const got = Array.from(last.ys[0]!.toArray() as Uint16Array, fromHalf);
    const maxError = got.reduce((m, v, i) => Math.max(m, Math.abs(v - want[i]!)), 0);
    const scale = want.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
    reference = { maxError, relative: maxError / Math.max(scale, 1e-6) };
    // The host accumulates in f64, a GPU in f32; both round to f16 after every layer.
    console.log(`host reference: max |error| ${maxError.toPrecision(3)} of max |y| ${scale.toPrecision(3)} (${reference.relative <= 1e-2 ? 'ok' : 'MISMATCH'})`);
  } else {
    console.log('host reference: skipped for this size (--check runs it)');
  }
  if (o.json !== undefined) {
    writeFileSync(o.json, `${JSON.stringify({
      what: 'examples/tensor-parallel.ts: a tensor-parallel MLP whose shards all-reduce with gdrpc', shards: o.shards, devices, batch: o.batch, ...o.shape,
      steps: o.steps, warmup_steps: WARMUP_STEPS, step_ms: stepMs, step_ms_median: median(stepMs), shard_run_ms_median: shardRun, compute_ms_median: compute, all_reduce_ms_median: reduce,
      all_reduce_bytes: reduceBytes, all_reduces_per_step: o.shape.layers, paths: last.stats[0]!.paths, identical, reference: reference ?? null,
    }, null, 2)}\n`);
  }
  await Promise.all(clients.map((client) => client.close()));
  if (!identical || (reference !== undefined && reference.relative > 1e-2)) process.exit(1);
}

if (role() === 'shard') await serveMlpShard(Number(process.argv.at(-1)));
else {
  await coordinator();
  process.exit(0);
}
