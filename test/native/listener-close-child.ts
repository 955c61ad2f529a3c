// A child for listener-close.test.ts: peers that connect at TCP level and send a UCX connection
// request's first bytes only after the listener closed (mode `pending`), or keep connecting while
// it closes (mode `racing`). UCX 1.22 called into the freed listener for such a request
// (openucx/ucx#11087): the process crashed. Prints the worker's drain counters, then exits 0.
import { connect as tcpConnect, type Socket } from 'node:net';
import { Context, Endpoint, Listener, Worker } from '../../core/ucx/index.ts';

const mode = process.argv[2] ?? 'pending';
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const context = Context.create({ config: { TLS: 'tcp' } });
const worker = Worker.create(context);
const listener = Listener.create(worker, { host: '127.0.0.1' });
const port = listener.port;
// A live connection made through the listener before it closes: it must carry data after.
const client = Endpoint.connect(worker, { host: '127.0.0.1', port });
await client.flush();

/** A raw TCP connection to the listener; resolves once connected. Errors after that are expected. */
function rawPeer(): Promise<Socket> {
  return new Promise((resolve) => {
    const socket = tcpConnect({ host: '127.0.0.1', port }, () => resolve(socket));
    socket.on('error', () => { /* reset or refused once the listener is gone */ });
  });
}
/** The 16 bytes UCX's TCP connection manager reads first (private-data length 0, status 0). */
const header = Buffer.alloc(16);

const peers: Socket[] = [];
let racing = true;
const racers: Promise<void>[] = [];
if (mode === 'pending') {
  for (let i = 0; i < 8; i += 1) peers.push(await rawPeer());
  // UCX accepts them on its async thread, then waits for their bytes.
  await sleep(200);
} else {
  for (let r = 0; r < 2; r += 1) {
    racers.push((async () => {
      while (racing) {
        const socket = await Promise.race([rawPeer(), sleep(100).then(() => undefined)]);
        if (socket === undefined) continue;
        await sleep(Math.random() * 2);
        socket.write(header);
        peers.push(socket);
      }
    })());
  }
  await sleep(300);
}
listener.close();
racing = false;
for (const socket of peers) if (!socket.destroyed) socket.write(header);
await Promise.all(racers);
// Time for UCX's async thread to read whatever reached it, and for the drains to settle: up to
// 10 s on a busy machine (a fixed 500 ms left one unsettled in a CI run under two CPU hogs).
await sleep(500);
for (const until = Date.now() + 10_000; worker.stats().drainsUnsettled > 0 && Date.now() < until;) await sleep(50);
// The live connection still works: a message from it to this worker.
const received = worker.tagRecv(new Uint8Array(4), 7n, (1n << 64n) - 1n);
await client.tagSend(7n, new Uint8Array([1, 2, 3, 4]));
const { length } = await received;
const stats = worker.stats();
console.log(JSON.stringify({ drainedSockets: stats.drainedSockets, drainsUnsettled: stats.drainsUnsettled, peers: peers.length, length }));
for (const socket of peers) socket.destroy();
await client.close({ force: true });
await worker.close();
context.close();
