// A child for thread-teardown.test.ts: worker threads that end with UCX objects still open (the
// thread calls process.exit, is terminated from outside, throws, or leaves an RPC server and
// client with a call in flight). Their environment's teardown closes those objects; the process
// and its main thread must live on. Prints one JSON line: each thread's exit code, then what a
// loopback round trip on the main thread received afterwards.
import { isMainThread, parentPort, Worker as Thread, workerData } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';
import { Context, Endpoint, Listener, MemoryRegion, RemoteKey, Worker } from '../../core/ucx/index.ts';

const ALL = (1n << 64n) - 1n;

/** Listener, both endpoints, a described send, a mapped region with its key unpacked on the
 *  client endpoint, and a receive left pending: everything the teardown has to close. */
async function openEverything(): Promise<{ worker: Worker; ep: Endpoint }> {
  const context = Context.create({ features: ['tag', 'rma', 'wakeup'], config: { TLS: 'tcp' } });
  const worker = Worker.create(context);
  const listener = Listener.create(worker, { host: '127.0.0.1' });
  const accepted = new Promise<Endpoint>((resolve) => listener.once('connection', resolve));
  const ep = Endpoint.connect(worker, { host: '127.0.0.1', port: listener.port });
  await accepted;
  const into = new Uint8Array(4096);
  const received = worker.tagRecv(into, 7n, ALL);
  await ep.tagSend(7n, new Uint8Array(4096).fill(1), { describe: true });
  await received;
  const region = MemoryRegion.map(context, new ArrayBuffer(1 << 16));
  RemoteKey.unpack(ep, region.packRkey());
  worker.tagRecv(new Uint8Array(16), 999n, ALL).catch(() => { /* cancelled by the teardown */ });
  return { worker, ep };
}

async function thread(mode: string): Promise<void> {
  if (mode === 'rpc') {
    const { inProcessEcho } = await import('../rpc/fixtures/in-process.ts');
    const pair = await inProcessEcho({ echo: () => new Promise(() => { /* never answers */ }) });
    const { EchoDescriptor } = await import('../schemas/gen/rpc/echo.ts');
    void pair.client.unary(EchoDescriptor.methods.echo, { tag: 'stuck' }).catch(() => {});
    await new Promise((resolve) => setTimeout(resolve, 50));
    process.exit(0);
  }
  const { worker, ep } = await openEverything();
  if (mode === 'exit') process.exit(0);
  if (mode === 'throw') throw new Error('thread failed with UCX objects open');
  // 'terminate': round trips keep running until the main thread terminates this one.
  parentPort!.postMessage('ready');
  for (let i = 0n; ; i += 1n) {
    const into = new Uint8Array(65536);
    const received = worker.tagRecv(into, 1000n + i, ALL);
    await ep.tagSend(1000n + i, new Uint8Array(65536));
    await received;
  }
}

function runThread(mode: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const boot = fileURLToPath(new URL('./fixtures/thread-boot.mjs', import.meta.url));
    const t = new Thread(boot, { workerData: { file: fileURLToPath(import.meta.url), mode }, stderr: true });
    t.stderr.resume();
    t.on('message', () => { void t.terminate(); });
    t.on('error', () => { /* 'throw': the exit code says it */ });
    t.on('exit', resolve);
    t.on('messageerror', reject);
  });
}

if (isMainThread) {
  const modes = process.argv.slice(2);
  const exits: Record<string, number[]> = {};
  for (let round = 0; round < 2; round += 1) {
    for (const mode of modes) (exits[mode] ??= []).push(await runThread(mode));
  }
  // The main thread's own UCX still works.
  const context = Context.create({ config: { TLS: 'tcp' } });
  const worker = Worker.create(context);
  const listener = Listener.create(worker, { host: '127.0.0.1' });
  const ep = Endpoint.connect(worker, { host: '127.0.0.1', port: listener.port });
  const into = new Uint8Array(5);
  const received = worker.tagRecv(into, 3n, ALL);
  await ep.tagSend(3n, new TextEncoder().encode('alive'));
  await received;
  await ep.close();
  listener.close();
  await worker.close();
  context.close();
  process.stdout.write(`${JSON.stringify({ exits, main: new TextDecoder().decode(into) })}\n`);
} else if ((workerData as { file?: string }).file === fileURLToPath(import.meta.url)) {
  await thread((workerData as { mode: string }).mode);
}
