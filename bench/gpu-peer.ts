// The serving process of bench/gpu.ts: a Sink server on the device named in argv, receiving into
// a pool mapped once. Announces its port; exits when stdin closes or after its time limit.
import { Server, type Device, type Tensor } from '../core/index.ts';
import { SinkDescriptor } from './schemas/gen/gpu_sink.ts';
import { receiveOn, receivingOn } from '../test/support/receive-placement.ts';
import { announceReady } from '../test/support/ready-line.ts';

const device = (process.argv[2] ?? 'cpu') as Device;
const poolBytes = Number(process.argv[3] ?? 64 << 20);
setTimeout(() => process.exit(3), Number(process.env.GDRPC_BENCH_PEER_TTL_MS ?? 900_000)).unref();

const server = Server.create({ poolBytes, maxTensorBytes: poolBytes });
server.register(receivingOn(SinkDescriptor, device), {
  ping: (args: { n: number }) => ({ n: args.n }),
  sink: (args: { x: Tensor }) => ({ n: args.x.byteLength }),
}, receiveOn(device));
const address = await server.listen({ host: '127.0.0.1', port: 0 });
announceReady({ port: address.port });
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
