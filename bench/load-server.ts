// The server process of bench/load.ts: serves Bench (ping, sink; bench/schemas/rpc_bench.gdrpc) with the options given as
// JSON in argv[2], announces its port, samples its RSS once a second, and answers snapshots over IPC.
import { Server, type ServerOptions, type Tensor } from '../core/index.ts';
import { countKind, type FromServer, type KindCount, type ServerSnapshot, type ToServer } from './load-protocol.ts';
import { BenchDescriptor } from './schemas/gen/rpc_bench.ts';
import { StallMonitor } from './load-stall.ts';
import { announceReady } from '../test/support/ready-line.ts';

const options = JSON.parse(process.argv[2] ?? '{}') as ServerOptions;
const send = (message: FromServer): void => { process.send!(message); };

const server = Server.create(options);
server.register(BenchDescriptor, {
  ping: () => ({}),
  sink: (args: { x: Tensor }) => ({ n: args.x.byteLength }),
});
let disconnects = 0;
const disconnectKinds: Record<string, KindCount> = {};
let errors = 0;
server.on('disconnect', ({ reason }: { reason: unknown }) => {
  disconnects += 1;
  countKind(disconnectKinds, reason instanceof Error ? reason.message : String(reason));
});
server.on('error', () => { errors += 1; });

const rss: Array<[number, number]> = [];
const sample = (): void => { rss.push([Date.now(), process.memoryUsage.rss()]); };
sample();
const sampler = setInterval(sample, 1000);
const stalls = new StallMonitor();

function snapshot(): ServerSnapshot {
  const memory = process.memoryUsage();
  return {
    rssBytes: memory.rss, heapTotalBytes: memory.heapTotal, heapUsedBytes: memory.heapUsed, externalBytes: memory.external, activeCalls: server.activeCalls, connectionCount: server.connectionCount,
    disconnects, disconnectKinds, errors, maxStallMs: stalls.maxMs, rss,
  };
}

process.on('message', (message: ToServer) => {
  if (message.kind === 'snapshot') {
    send({ kind: 'snapshot', snapshot: snapshot() });
    if (message.resetStall === true) stalls.reset();
  } else {
    clearInterval(sampler);
    stalls.stop();
    void server.shutdown({ graceMs: 0 }).then(() => process.exit(0));
  }
});
// The parent is gone (crashed, killed): nobody will ask for anything.
process.on('disconnect', () => process.exit(1));

const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
announceReady({ port });
