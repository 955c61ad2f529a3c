// The shard worker of examples/tensor-parallel.ts and examples/gdr-rpc.ts: serves ShardWorker for
// one rank. The arithmetic is a plain host stand-in for GPU kernels (tensors that arrive in GPU
// memory are copied to the host for it); what the examples show is how the tensors travel.
import { Code, GdrpcError, Server, Tensor } from '../core/index.ts';
import { Precision, ShardWorker } from '../schemas/gen/tensor_parallel.ts';
import { fromHalf, toHalf } from '../core/index.ts';
import { announce } from './peer.ts';

export const MODEL = 4096;
export const HIDDEN = 512;
export const BATCH = 2;

/** f16 tensor of `shape` from numbers. */
export function half(shape: number[], values: ArrayLike<number>): Tensor {
  const bits = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i += 1) bits[i] = toHalf(values[i]!);
  return Tensor.fromArray(bits, { shape, dtype: 'f16' });
}
/** Numbers of an f16 tensor (copied to the host first if it lives on a GPU). */
export function numbers(tensor: Tensor): Float64Array {
  const bits = (tensor.device === 'cpu' ? tensor : tensor.to('cpu')).toArray() as Uint16Array;
  return Float64Array.from(bits, fromHalf);
}
/** out[b, n] = sum_k a[b, k] * w[k, n] */
export function matmul(a: Float64Array, w: Float64Array, rows: number, inner: number, cols: number): Float64Array {
  const out = new Float64Array(rows * cols);
  for (let r = 0; r < rows; r += 1) for (let k = 0; k < inner; k += 1) {
    const x = a[r * inner + k]!;
    if (x !== 0) for (let c = 0; c < cols; c += 1) out[r * cols + c]! += x * w[k * cols + c]!;
  }
  return out;
}

/** Serves ShardWorker as rank `rank` of `world`; prints LISTENING <port>. */
export async function serveShard(rank: number, world: number): Promise<void> {
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
      // Each PartialActivation binds its own batch (docs/schema.md), so the shards' agreement is checked here.
      const batch = partials[0]?.y.shape[0];
      if (batch === undefined || partials.some((p) => p.y.shape[0] !== batch)) {
        throw new GdrpcError(Code.INVALID_ARGUMENT, 'reduce: partials must be non-empty and share one batch size');
      }
      const sum = new Float64Array(partials[0]!.y.numel);
      for (const p of partials) numbers(p.y).forEach((v, i) => { sum[i]! += v; });
      return { y: half([...partials[0]!.y.shape], sum) };
    },
  });
  announce((await server.listen({ host: '127.0.0.1' })).port);
}

