// The shard worker of examples/gdr-rpc.ts: serves ShardWorker for one rank, computing on its GPU
// with gdrpc's kernels (core/compute) where there is one, so that its arguments and results stay
// in GPU memory and travel GPU to GPU; without a GPU the kernels' host twins do the same work.
import { Code, GdrpcError, loadKernels, Server, Tensor, toHalf, type CallContext } from '../core/index.ts';
import { Precision, ShardWorker } from '../schemas/gen/tensor_parallel.ts';
import { sumInOrder } from './mlp-shard.ts';
import { announce, exampleDevice } from './peer.ts';

export const MODEL = 4096;
export const HIDDEN = 512;
export const BATCH = 2;

/** f16 tensor of `shape` from numbers. */
export function half(shape: number[], values: ArrayLike<number>): Tensor {
  const bits = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i += 1) bits[i] = toHalf(values[i]!);
  return Tensor.fromArray(bits, { shape, dtype: 'f16' });
}

/** Serves ShardWorker as rank `rank` of `world`; prints LISTENING <port>. */
export async function serveShard(rank: number, world: number): Promise<void> {
  const device = exampleDevice(rank);
  const kernels = loadKernels(device);
  const weights = new Map<number, { up: Tensor; down: Tensor }>();
  const server = Server.create({ poolBytes: 64 << 20, ...(device === 'cpu' ? {} : { device: device as `cuda:${number}` }) });
  /** A tensor for a result, released once the result has been sent. */
  const result = (shape: number[], ctx: CallContext): Tensor => {
    const t = Tensor.zeros(shape, 'f16', { device });
    ctx.afterSend(() => t.release());
    return t;
  };
  ShardWorker.register(server, {
    info: () => ({ shard: { rank, worldSize: world, precision: Precision.F16, hiddenShard: HIDDEN / world } }),
    loadWeights: ({ layer, up, down }) => {
      // Arguments are released when the call ends: keep copies on this shard's device.
      weights.get(layer)?.up.release();
      weights.get(layer)?.down.release();
      weights.set(layer, { up: up.to(device), down: down.to(device) });
      return {};
    },
    forward: async ({ x, residual, layer, scale }, ctx) => {
      const w = weights.get(layer);
      if (w === undefined) throw new GdrpcError(Code.FAILED_PRECONDITION, `no weights for layer ${layer}: call loadWeights first`);
      if (rank === 0 && scale !== 0 && scale !== 1) throw new GdrpcError(Code.INVALID_ARGUMENT, `scale ${scale}: this worker adds the residual once (1) or not at all (0)`);
      const batch = x.shape[0]!;
      const h = Tensor.zeros([batch, w.up.shape[1]!], 'f16', { device });
      const y = result([batch, MODEL], ctx);
      kernels.gemm(h, x, w.up, { relu: true });
      kernels.gemm(y, h, w.down, rank === 0 && scale === 1 ? { residual } : {});
      // x, residual and h must outlive the kernels that read them.
      await kernels.finished();
      h.release();
      return { partial: { rank, y } };
    },
    reduce: async ({ partials }, ctx) => {
      // Each PartialActivation binds its own batch (docs/schema.md), so the shards' agreement is checked here.
      const batch = partials[0]?.y.shape[0];
      if (batch === undefined || partials.some((p) => p.y.shape[0] !== batch)) {
        throw new GdrpcError(Code.INVALID_ARGUMENT, 'reduce: partials must be non-empty and share one batch size');
      }
      // One partial is its own sum: an argument, released only after the result has left.
      const y = sumInOrder(kernels, partials.map((p) => p.y), result([batch, MODEL], ctx));
      await kernels.finished();
      return { y };
    },
  });
  announce((await server.listen({ host: '127.0.0.1' })).port);
}
