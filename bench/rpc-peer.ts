// The serving side of bench/rpc.ts, in its own process: `gdrpc` or `grpc` as argv[2]. Prints
// its port when ready (test/support/ready-line.ts); exits when stdin closes.
import type * as Grpc from '@grpc/grpc-js';
import { Server, type Tensor } from '../core/index.ts';
import { BenchDescriptor } from './schemas/gen/rpc_bench.ts';
import { announceReady } from '../test/support/ready-line.ts';

const mode = process.argv[2];
if (mode === 'gdrpc') {
  const server = Server.create({ poolBytes: 600 << 20, maxTensorBytes: 512 << 20, maxCallsPerConnection: 1024 });
  server.register(BenchDescriptor, {
    ping: () => ({}),
    sink: (args: { x: Tensor }) => ({ n: args.x.byteLength }),
  });
  const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
  announceReady({ port });
  process.stdin.on('end', () => void server.shutdown({ graceMs: 0 }).then(() => process.exit(0)));
  process.stdin.resume();
} else {
  // Loaded only here: the GPU machine's pack carries gdrpc's runtime packages, not grpc-js.
  const grpc: typeof Grpc = await import('@grpc/grpc-js');
  const server = new grpc.Server({ 'grpc.max_receive_message_length': -1, 'grpc.max_send_message_length': -1 });
  const identity = (b: Buffer): Buffer => b;
  const method = (path: string) => ({ path, requestStream: false, responseStream: false, requestSerialize: identity, requestDeserialize: identity, responseSerialize: identity, responseDeserialize: identity });
  const reply = Buffer.alloc(8);
  server.addService({ ping: method('/bench.Bench/ping'), sink: method('/bench.Bench/sink') }, {
    ping: (_call: Grpc.ServerUnaryCall<Buffer, Buffer>, done: Grpc.sendUnaryData<Buffer>) => done(null, reply),
    sink: (call: Grpc.ServerUnaryCall<Buffer, Buffer>, done: Grpc.sendUnaryData<Buffer>) => {
      reply.writeUInt32LE(call.request.length >>> 0, 0);
      done(null, reply);
    },
  });
  server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, port) => {
    if (error) throw error;
    announceReady({ port });
  });
  process.stdin.on('end', () => server.tryShutdown(() => process.exit(0)));
  process.stdin.resume();
}
