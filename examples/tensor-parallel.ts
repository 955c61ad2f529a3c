// Tensor-parallel MLP over gdrpc: a coordinator splits the up projection by columns and the down
// projection by rows over N shard workers (separate processes), runs forward on every shard in
// parallel, then has shard 0 all-reduce the partial activations. The arithmetic is a plain host
// stand-in for the kernels; what the example is about is where the tensors go: with a GPU they
// are allocated on cuda:0 and travel GPU to GPU (the transfer paths are printed).
//   node --import tsx examples/tensor-parallel.ts [shards=2]
import { fileURLToPath } from 'node:url';
import { Client, callInfo, type TransferInfo } from '../core/index.ts';
import { ShardWorker, type PartialActivation } from '../schemas/gen/tensor_parallel.ts';
import { exampleDevice, role, startRole } from './peer.ts';
import { BATCH, HIDDEN, MODEL, half, matmul, numbers, serveShard } from './shard-worker.ts';

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
  const residualValues = numbers(residual);
  const expected = matmul(hidden, numbers(half([HIDDEN, MODEL], down)), BATCH, HIDDEN, MODEL).map((v, i) => v + residualValues[i]!);
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

if (role() === 'shard') await serveShard(Number(process.argv.at(-2)), Number(process.argv.at(-1)));
else {
  await coordinator(Number(process.argv[2] ?? 2));
  process.exit(0);
}
