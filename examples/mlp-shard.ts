// One shard of the tensor-parallel MLP of examples/tensor-parallel.ts, in its own process and on
// its own GPU (or in host memory without one). Layer l computes, on every shard r,
//   h_r = relu(x @ up[l]_r + upBias[l]_r)        (up split by columns)
//   p_r = h_r @ down[l]_r  (+ downBias[l] + x on rank 0)   (down split by rows)
// and the next x is p_0 + p_1 + ... added in rank order on every shard (so every shard holds the
// same bits). The partials travel shard to shard with gdrpc, GPU to GPU, and must not be staged
// through host memory (noStaging). Weights are made on the device by the fill kernel from seeds.
import { callInfo, Client, CudaEvent, loadKernels, Server, Tensor, type Kernels } from '../core/index.ts';
import { MlpShard, MlpShardClient, type MlpShape, type RunStats } from '../schemas/gen/mlp.ts';
import { announce, exampleDevice } from './peer.ts';


/** The weights of one layer on one shard. */
export interface LayerWeights { up: Tensor; upBias: Tensor; down: Tensor; downBias: Tensor }

/** Makes shard `rank`'s slices of layer `layer` with `kernels` (on its device): the same bits on
 *  any device for the same seeds, so the coordinator can rebuild them on the host. Scales keep
 *  activations near unit size (uniform weights of variance 1 / fan-in). */
export function makeLayer(kernels: Kernels, shape: MlpShape, world: number, rank: number, layer: number): LayerWeights {
  const slice = shape.hidden / world;
  const seed = (k: number): number => (shape.seed + layer * 7919 + rank * 104_729 + k * 15_485_863) >>> 0;
  const make = (dims: number[], k: number, scale: number): Tensor => {
    const t = Tensor.zeros(dims, 'f16', { device: kernels.device });
    kernels.fill(t, { seed: seed(k), scale });
    return t;
  };
  return {
    up: make([shape.model, slice], 1, Math.sqrt(12 / shape.model)),
    upBias: make([slice], 2, 0.1),
    down: make([slice, shape.model], 3, Math.sqrt(12 / shape.hidden)),
    // One bias for the whole layer: every shard makes it, rank 0 adds it.
    downBias: make([shape.model], 4, 0.1),
  };
}

/** Queues shard `rank`'s part of one layer: h = relu(x up + upBias), partial = h down (+ downBias + x on rank 0). */
export function layerPartial(kernels: Kernels, w: LayerWeights, x: Tensor, h: Tensor, partial: Tensor, rank: number): void {
  kernels.gemm(h, x, w.up, { bias: w.upBias, relu: true });
  kernels.gemm(partial, h, w.down, rank === 0 ? { bias: w.downBias, residual: x } : {});
}

/** Adds `parts` in order into `out` and returns it (one part is its own sum). */
export function sumInOrder(kernels: Kernels, parts: Tensor[], out: Tensor): Tensor {
  if (parts.length === 1) return parts[0]!;
  kernels.add(out, parts[0]!, parts[1]!);
  for (const part of parts.slice(2)) kernels.add(out, out, part);
  return out;
}

/** Below this, UCX sends CUDA memory eagerly through host memory (its rendezvous threshold was
 *  1,290 bytes for CUDA over TCP on the H200 machine); from here on it takes cuda_ipc. */
const EAGER_BYTES = 4096;

interface Contribution { partial: Tensor; taken: () => void }

/** Partials from the other shards, by run, layer and rank; a waiter per layer. */
class Inbox {
  readonly #items = new Map<string, Contribution>();
  readonly #waiters = new Map<string, () => void>();

  put(run: number, layer: number, rank: number, contribution: Contribution): void {
    this.#items.set(`${run}/${layer}/${rank}`, contribution);
    this.#waiters.get(`${run}/${layer}`)?.();
  }

  /** Resolves with the contributions of `ranks` for (run, layer) once all have arrived. */
  async take(run: number, layer: number, ranks: number[]): Promise<Map<number, Contribution>> {
    const key = `${run}/${layer}`;
    const have = (): boolean => ranks.every((r) => this.#items.has(`${key}/${r}`));
    while (!have()) await new Promise<void>((resolve) => this.#waiters.set(key, resolve));
    this.#waiters.delete(key);
    return new Map(ranks.map((r) => {
      const item = this.#items.get(`${key}/${r}`)!;
      this.#items.delete(`${key}/${r}`);
      return [r, item];
    }));
  }
}

/** Serves MlpShard; prints LISTENING <port>. */
export async function serveMlpShard(rank: number): Promise<void> {
  // GPUs in turn (shards share a GPU when there are fewer), else the host.
  const device = exampleDevice(rank);
  const kernels = loadKernels(device);
  const server = Server.create({ poolBytes: 64 << 20, ...(device === 'cpu' ? {} : { device: device as `cuda:${number}` }) });
  const inbox = new Inbox();
  let world = 1;
  let peers: Array<MlpShardClient | undefined> = [];
  let clients: Client[] = [];
  let layers: LayerWeights[] = [];
  let runs = 0;
  /** Activations and partials by batch size, two of each so a layer never overwrites what the previous one still reads. */
  const buffers = new Map<number, { h: Tensor; partial: Tensor[]; acc: Tensor[] }>();
  const buffersFor = (batch: number, shape: MlpShape): { h: Tensor; partial: Tensor[]; acc: Tensor[] } => {
    let b = buffers.get(batch);
    if (b === undefined) {
      // Partials are sent: from a mapped pool they are registered with UCX once, not per send.
      const pool = clients[0]?.pool(device);
      const alloc = (dims: number[]): Tensor => (pool !== undefined ? pool.allocate(dims, 'f16') : Tensor.zeros(dims, 'f16', { device }));
      b = { h: Tensor.zeros([batch, shape.hidden / world], 'f16', { device }), partial: [alloc([batch, shape.model]), alloc([batch, shape.model])], acc: [alloc([batch, shape.model]), alloc([batch, shape.model])] };
      buffers.set(batch, b);
    }
    return b;
  };
  let shape: MlpShape | undefined;

  MlpShard.register(server, {
    setup: async (args) => {
      if (args.shape.hidden % args.worldSize !== 0) throw new Error(`hidden ${args.shape.hidden} is not a multiple of ${args.worldSize} shards`);
      world = args.worldSize;
      shape = args.shape;
      layers = Array.from({ length: args.shape.layers }, (_, l) => makeLayer(kernels, args.shape, world, rank, l));
      clients = await Promise.all(args.peers.map((address, r) => (r === rank ? undefined : Client.connect(address, { poolBytes: 16 << 20 }))).filter((c) => c !== undefined));
      let next = 0;
      peers = args.peers.map((_, r) => (r === rank ? undefined : new MlpShardClient(clients[next++]!)));
      await kernels.finished();
      return { device };
    },
    contribute: ({ run, layer, rank: from, partial }) => new Promise<Record<string, never>>((resolve) => {
      // Returns once the partial has been added in: until then its pool block must stay.
      inbox.put(run, layer, from, { partial, taken: () => resolve({}) });
    }),
    run: async ({ x }) => {
      const run = runs++;
      const batch = x.shape[0]!;
      const buf = buffersFor(batch, shape!);
      const stats: RunStats = { computeMs: 0, reduceMs: 0, totalMs: 0, paths: [] };
      const started = performance.now();
      const others = peers.map((_, r) => r).filter((r) => r !== rank);
      const timing = kernels.stream !== undefined ? [CudaEvent.create(kernels.stream.device, { timing: true }), CudaEvent.create(kernels.stream.device, { timing: true })] : undefined;
      let act = x;
      try {
        for (let l = 0; l < layers.length; l += 1) {
          const partial = buf.partial[l % 2]!;
          const t0 = performance.now();
          timing?.[0]!.record(kernels.stream!);
          layerPartial(kernels, layers[l]!, act, buf.h, partial, rank);
          timing?.[1]!.record(kernels.stream!);
          // Host kernels have run by now; GPU ones are timed by their events below.
          const hostCompute = performance.now() - t0;
          // The sends wait for the partial's producer (the gemm) on their own, not for the device.
          // GPU to GPU or not at all (noStaging), except below a few KiB: there UCX sends CUDA
          // memory eagerly through a host copy (under its rendezvous threshold), which noStaging
          // would refuse.
          const noStaging = partial.byteLength >= EAGER_BYTES;
          const sending = Promise.all(others.map((r) => peers[r]!.contribute({ run, layer: l, rank, partial }, { noStaging }).then((result) => ({ r, result }))));
          // Awaited below, after the peers' partials are in: marked handled now so that a send
          // failing meanwhile fails this run instead of the process (an unhandled rejection).
          sending.catch(() => {});
          const incoming = await inbox.take(run, l, others);
          const next = sumInOrder(kernels, peers.map((_, r) => (r === rank ? partial : incoming.get(r)!.partial)), buf.acc[l % 2]!);
          await kernels.finished();
          for (const c of incoming.values()) c.taken();
          const sent = await sending;
          // Compute is the GPU time of the two matrix products; the rest of the layer is the all-reduce.
          const compute = timing !== undefined ? timing[1]!.elapsedSince(timing[0]!) : hostCompute;
          stats.computeMs += compute;
          stats.reduceMs += performance.now() - t0 - compute;
          if (l === layers.length - 1) {
            stats.paths = sent.map(({ r, result }) => `rank ${r}: ${(callInfo(result)?.transfers ?? []).map((t) => `${t.mover}/${t.path}`).join(', ') || 'no transfer'}`);
          }
          act = next;
        }
      } finally {
        for (const e of timing ?? []) e.close();
      }
      stats.totalMs = performance.now() - started;
      return { y: act, stats };
    },
  });
  announce((await server.listen({ host: '127.0.0.1' })).port);
}
