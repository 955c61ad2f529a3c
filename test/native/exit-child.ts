// A process that leaves UCX objects in a given state and lets Node decide when to exit:
// 'idle' (context + worker only) and 'leak' (everything open, nothing closed) must exit by
// themselves, cleanly; 'listening' must stay alive (a listener keeps the loop referenced).
import { Context, Endpoint, Listener, MemoryRegion, Worker } from '../../core/ucx/index.ts';
import { announceReady } from '../support/ready-line.ts';

const mode = process.argv[2];
const context = Context.create({ config: { TLS: 'tcp' } });
const worker = Worker.create(context);
if (mode === 'leak') {
  MemoryRegion.map(context, new ArrayBuffer(4096));
  const listener = Listener.create(worker, { host: '127.0.0.1' });
  const ep = Endpoint.connect(worker, { host: '127.0.0.1', port: listener.port });
  await ep.flush();
  // Leave a receive pending too, then exit explicitly with everything still open.
  void worker.tagRecv(Buffer.alloc(8), 1n, 1n).catch(() => {});
  process.exit(0);
}
if (mode === 'listening') Listener.create(worker, { host: '127.0.0.1' });
announceReady();
