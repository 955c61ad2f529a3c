// Tensor-parallel MLP over gdrpc: a coordinator splits the up projection by columns and the down
// projection by rows over N shard workers (separate processes), runs forward on every shard in
// parallel, then has shard 0 all-reduce the partial activations. The arithmetic is a plain host
// stand-in for the kernels; what the example is about is where the tensors go: with a GPU they
// are allocated on cuda:0 and travel GPU to GPU (the transfer paths are printed).
//   node --import tsx examples/tensor-parallel.ts [shards=2]
import { fileURLToPath } from 'node:url';
import { Client, Server, Tensor, callInfo, type TransferInfo } from '../core/index.ts';
import { Precision, ShardWorker, type PartialActivation } from '../schemas/gen/tensor_parallel.ts';
import { fromHalf, toHalf } from './half.ts';
import { announce, exampleDevice, role, startRole } from './peer.ts';

const MODEL = 4096;
const HIDDEN = 512;
const BATCH = 2;

/** f16 tensor of `shape` from numbers. */
function half(shape: number[], values: ArrayLike<number>): Tensor {
  const bits = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i += 1) bits[i] = toHalf(values[i]!);
  return Tensor.fromArray(bits, { shape, dtype: 'f16' });
}
/** Numbers of an f16 tensor (copied to the host first if it lives on a GPU). */
function numbers(tensor: Tensor): Float64Array {
  const bits = (tensor.device === 'cpu' ? tensor : tensor.to('cpu')).toArray() as Uint16Array;
  return Float64Array.from(bits, fromHalf);
}
/** out[b, n] = sum_k a[b, k] * w[k, n] */
function matmul(a: Float64Array, w: Float64Array, rows: number, inner: number, cols: number): Float64Array {
  const out = new Float64Array(rows * cols);
  for (let r = 0; r < rows; r += 1) for (let k = 0; k < inner; k += 1) {
    const x = a[r * inner + k]!;
    if (x !== 0) for (let c = 0; c < cols; c += 1) out[r * cols + c]! += x * w[k * cols + c]!;
  }
  return out;
}

async function shard(rank: number, world: number): Promise<void> {
  const weights = new Map<number, { up: Float64Array; down: Float64Array; hidden: number }>();
  const server = Server.create({ poolBytes: 64 << 20 });
  ShardWorker.register(server, {
    info: () => ({ shard: { rank, worldSize: world, precision: Precision.F16, hiddenShard: HIDDEN / world } }),
    loadWeights: ({ layer, up, down }) => {
      weights.set(layer, { up: numbers(up), down: numbers(down), hidden: up.shape[1]! });
      return {};
    },
    forward: ({ x, residual, layer, scale }) => {
      const w = weights.get(layer)!;
      const batch = x.shape[0]!;
      const h = matmul(numbers(x), w.up, batch, MODEL, w.hidden).map((v) => Math.max(0, v));
      const y = matmul(h, w.down, batch, w.hidden, MODEL);
      if (rank === 0) numbers(residual).forEach((v, i) => { y[i]! += scale * v; });
      return { partial: { rank, y: half([batch, MODEL], y) } };
    },
    reduce: ({ partials }) => {
      const sum = new Float64Array(partials[0]!.y.numel);
      for (const p of partials) numbers(p.y).forEach((v, i) => { sum[i]! += v; });
      return { y: half([...partials[0]!.y.shape], sum) };
    },
  });
  announce((await server.listen({ host: '127.0.0.1' })).port);
}

async function coordinator(world: number): Promise<void> {
  const file = fileURLToPath(import.meta.url);
  const addresses = await Promise.all(Array.from({ length: world }, (_, r) => startRole(file, 'shard', [String(r), String(world)])));
  const clients = await Promise.all(addresses.map((address) => Client.connect(address)));
  const shards = clients.map((client) => ShardWorker.client(client));
  const device = exampleDevice();
  const random = (n: number, scale: number): Float64Array => Float64Array.from({ length: n }, (_, i) => Math.sin(i * 12.9898 + n) * scale);

  const up = random(MODEL * HIDDEN, 0.02);
  const down = random(HIDDEN * MODEL, 0.02);
  const slice = HIDDEN / world;
  await Promise.all(shards.map((s, r) => {
    const upShard = new Float64Array(MODEL * slice);
    for (let k = 0; k < MODEL; k += 1) for (let c = 0; c < slice; c += 1) upShard[k * slice + c] = up[k * HIDDEN + r * slice + c]!;
    const downShard = down.subarray(r * slice * MODEL, (r + 1) * slice * MODEL);
    return s.loadWeights({ layer: 0, up: half([MODEL, slice], upShard).to(device), down: half([slice, MODEL], downShard).to(device) });
  }));

  const x = half([BATCH, MODEL], random(BATCH * MODEL, 1)).to(device);
  const residual = half([BATCH, MODEL], random(BATCH * MODEL, 0.5)).to(device);
  const started = performance.now();
  const forwards = await Promise.all(shards.map((s) => s.forward({ x, residual, layer: 0, scale: 1 })));
  const partials: PartialActivation[] = forwards.map((f) => f.partial);
  const reduced = await shards[0]!.reduce({ partials });
  const elapsed = performance.now() - started;

  // Check against the same MLP computed here in one piece.
  const xs = numbers(x);
  const hidden = matmul(xs, numbers(half([MODEL, HIDDEN], up)), BATCH, MODEL, HIDDEN).map((v) => Math.max(0, v));
  const expected = matmul(hidden, numbers(half([HIDDEN, MODEL], down)), BATCH, HIDDEN, MODEL).map((v, i) => v + numbers(residual)[i]!);
  const got = numbers(reduced.y);
  const maxError = got.reduce((m, v, i) => Math.max(m, Math.abs(v - expected[i]!)), 0);
  console.log(`${world} shards, batch ${BATCH}, model ${MODEL}, hidden ${HIDDEN}: forward + reduce in ${elapsed.toFixed(1)} ms, max |error| ${maxError.toFixed(4)} (f16)`);
  const show = (what: string, transfers: TransferInfo[] | undefined): void => {
    for (const t of transfers ?? []) console.log(`  ${what} ${t.argument}: ${t.bytes} bytes by ${t.mover} over ${t.path}`);
  };
  show('forward', callInfo(forwards[0]!)?.transfers);
  show('reduce', callInfo(reduced)?.transfers);
  await Promise.all(clients.map((client) => client.close()));
  if (maxError > 0.05) throw new Error('the sharded result does not match');
}

if (role() === 'shard') await shard(Number(process.argv.at(-2)), Number(process.argv.at(-1)));
else {
  await coordinator(Number(process.argv[2] ?? 2));
  process.exit(0);
}
