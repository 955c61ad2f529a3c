// The serving process of bench/gpu.ts: a Sink server on the device named in argv, receiving into
// a pool mapped once. Announces its port; exits when stdin closes or after its time limit.
import { cuda } from '../core/cuda.ts';
import { Runtime, Server, type Device, type Tensor, type TensorPool } from '../core/index.ts';
import { SinkDescriptor } from './schemas/gen/gpu_sink.ts';
import { receiveOn, receivingOn } from '../test/support/receive-placement.ts';
import { announceReady } from '../test/support/ready-line.ts';

const device = (process.argv[2] ?? 'cpu') as Device;
const poolBytes = Number(process.argv[3] ?? 64 << 20);
setTimeout(() => process.exit(3), Number(process.env.GDRPC_BENCH_PEER_TTL_MS ?? 900_000)).unref();

// The blocks of the last `blocks` call (handles to them stay valid while the caller's connection
// lasts), carved from a pool of their own.
const blocks: Tensor[] = [];
let blockPool: TensorPool | undefined;

/** The blocks' pool, with room for `bytes` more, once the blocks of the call before are released. */
function freshBlocks(bytes: number): TensorPool {
  for (const block of blocks.splice(0)) block.release();
  const needed = bytes + (1 << 20);
  if (blockPool === undefined || blockPool.stats().capacity < needed) {
    blockPool?.close({ force: true });
    blockPool = Runtime.default().createPool({ device, bytes: needed });
  }
  return blockPool;
}

// The bench's own processes trust each other: direct block-table pulls are granted (kv-blocks).
const server = Server.create({ poolBytes, maxTensorBytes: poolBytes, directPulls: true });
server.register(receivingOn(SinkDescriptor, device), {
  ping: (args: { n: number }) => ({ n: args.n }),
  sink: (args: { x: Tensor }) => ({ n: args.x.byteLength }),
  sinkList: (args: { xs: Tensor[] }) => ({ count: args.xs.length }),
  blocks: (args: { count: number; bytes: number }) => {
    const pool = freshBlocks(args.count * args.bytes);
    for (let i = 0; i < args.count; i += 1) {
      const block = pool.allocate([args.bytes], 'u8');
      if (device === 'cpu') block.bytes().fill(i & 0xff);
      else cuda.memset(block.address, i & 0xff, args.bytes);
      blocks.push(block);
    }
    return { items: blocks.map((h) => ({ h })) };
  },
  region: (args: { count: number; bytes: number }) => {
    const region = freshBlocks(args.count * args.bytes).allocate([args.count, args.bytes], 'u8');
    for (let i = 0; i < args.count; i += 1) {
      if (device === 'cpu') region.bytes().fill(i & 0xff, i * args.bytes, (i + 1) * args.bytes);
      else cuda.memset(region.address + BigInt(i * args.bytes), i & 0xff, args.bytes);
    }
    blocks.push(region);
    return { h: region };
  },
}, receiveOn(device));
const address = await server.listen({ host: '127.0.0.1', port: 0 });
announceReady({ port: address.port });
process.stdin.resume();
process.stdin.on('end', () => {
  // How often calls waited for the receiving pool: one that holds a single tensor of the largest
  // size makes back-to-back calls of that size wait for the previous call's release.
  for (const pool of server.poolStats()) process.stderr.write(`gpu-peer: pool on ${pool.device} (${pool.capacity} B): ${pool.waited} allocation(s) waited\n`);
  process.exit(0);
});
