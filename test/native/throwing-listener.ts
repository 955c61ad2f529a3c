// Child of throwing-listener.test.ts: an endpoint 'close' listener that throws must not wedge the
// worker (a later endpoint still moves data) nor leak native requests.
import { Context, Worker, Listener, Endpoint, nativeStats } from '../../core/ucx/index.ts';

const thrown: string[] = [];
process.on('uncaughtException', (error) => thrown.push(error.message));

const context = Context.create({ config: { TLS: 'tcp' } });
const worker = Worker.create(context);
const listener = Listener.create(worker, { host: '127.0.0.1', port: 0 });
const accepted: Endpoint[] = [];
listener.on('connection', (ep) => accepted.push(ep));

const first = Endpoint.connect(worker, { host: '127.0.0.1', port: listener.port });
first.on('close', () => { throw new Error('listener threw'); });
await first.flush();
const closing = first.close().then(() => 'closed', (error: Error) => `rejected: ${error.message}`);
const closeOutcome = await closing;
await new Promise((resolve) => setTimeout(resolve, 200));

const second = Endpoint.connect(worker, { host: '127.0.0.1', port: listener.port });
await second.flush();
const got = new Uint8Array(4);
const received = worker.tagRecv(got, 5n, 0xffff_ffff_ffff_ffffn);
await second.tagSend(5n, new Uint8Array([1, 2, 3, 4]));
const info = await received;

await second.close();
for (const ep of accepted) await ep.close({ force: true });
listener.close();
await worker.close();
context.close();
console.log(JSON.stringify({ thrown, closeOutcome, bytes: [...got], length: info.length, stats: nativeStats() }));
