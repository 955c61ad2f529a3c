// A GPU-direct RPC: the caller's tensors live in GPU memory (a mapped pool on cuda:0) and the call
// demands `noStaging`, so the bytes must go GPU to GPU (cuda_ipc on one node, GPUDirect RDMA
// between nodes) or the call fails at once with FAILED_PRECONDITION instead of quietly copying
// through host memory. Each transfer's path is printed. Without a GPU the same program runs on
// host memory (there is nothing to stage) and says so.
//   node --import tsx examples/gdr-rpc.ts
import { fileURLToPath } from 'node:url';
import { Client, Code, GdrpcError, callInfo, cuda, type Tensor } from '../core/index.ts';
import { ShardWorker } from '../schemas/gen/tensor_parallel.ts';
import { exampleDevice, role, startRole } from './peer.ts';
import { BATCH, MODEL, half } from './shard-worker.ts';

if (role() === 'shard') {
  const { serveShard } = await import('./shard-worker.ts');
  await serveShard(0, 1);
} else {
  const address = await startRole(fileURLToPath(import.meta.url), 'shard');
  const client = await Client.connect(address, { poolBytes: 256 << 20 });
  const shard = ShardWorker.client(client);
  const device = exampleDevice();
  console.log(device === 'cpu' ? 'no GPU here: tensors stay in host memory' : `tensors on ${device}, from the client's mapped pool`);

  // Tensors from the client's pool are registered with UCX once, not per call.
  const pool = client.pool(device);
  const place = (t: Tensor): Tensor => {
    const placed = pool.allocate([...t.shape], t.dtype);
    if (device === 'cpu') placed.bytes().set(t.bytes());
    else cuda.copy(placed.address, t.bytes(), t.byteLength);
    return placed;
  };
  const hidden = 256;
  const sine = (n: number, s: number) => Float64Array.from({ length: n }, (_, i) => Math.sin(i * 0.37 + s) * 0.02);
  await shard.loadWeights({ layer: 0, up: place(half([MODEL, hidden], sine(MODEL * hidden, 1))), down: place(half([hidden, MODEL], sine(hidden * MODEL, 2))) }, { noStaging: true });
  const x = place(half([BATCH, MODEL], sine(BATCH * MODEL, 3)));
  const residual = place(half([BATCH, MODEL], sine(BATCH * MODEL, 4)));

  for (const mover of ['tag', 'rma'] as const) {
    try {
      const started = performance.now();
      const calls = 20;
      let last: Awaited<ReturnType<typeof shard.forward>> | undefined;
      for (let i = 0; i < calls; i += 1) {
        last?.partial.y.release();
        last = await shard.forward({ x, residual, layer: 0, scale: 1 }, { noStaging: true, mover });
      }
      console.log(`forward (${mover}): ${((performance.now() - started) / calls).toFixed(2)} ms per call (${calls} calls, noStaging)`);
      for (const t of callInfo(last!)?.transfers ?? []) console.log(`  ${t.argument}: ${t.bytes} bytes by ${t.mover} over ${t.path}`);
      last?.partial.y.release();
    } catch (error) {
      if (!(error instanceof GdrpcError) || error.code !== Code.FAILED_PRECONDITION) throw error;
      // RMA reads of GPU memory go through host memory in UCX 1.22 (no cuda_ipc RMA lane).
      console.log(`forward (${mover}): refused as asked: ${error.rawMessage}`);
    }
  }
  await client.close();
  process.exit(0);
}
