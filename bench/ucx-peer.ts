// The far side of bench/ucx.ts: listens, prints its port, then serves one client.
//   pingpong <size> <iters>: echo every message back.
//   stream <size> <iters>:   receive iters messages, then send one ack.
import { Context, Worker, Listener, MemoryRegion, type Endpoint } from '../core/ucx/index.ts';
import { announceReady } from '../test/support/ready-line.ts';

export const TAG_DATA = 1n;
export const TAG_REPLY = 2n;
export const FULL_MASK = 0xffff_ffff_ffff_ffffn;

const [mode, sizeArg, itersArg] = process.argv.slice(2);
const size = Number(sizeArg);
const iters = Number(itersArg);
const context = Context.create();
const worker = Worker.create(context, { busyPollUs: Number(process.env.GDRPC_BENCH_BUSY_POLL_US ?? 0) });
const region = MemoryRegion.map(context, new ArrayBuffer(Math.max(size, 8)));
const span = region.span(0, size);
const listener = Listener.create(worker, { host: '127.0.0.1', port: 0 });

async function serve(ep: Endpoint): Promise<void> {
  if (mode === 'pingpong') {
    for (let i = 0; i < iters; i++) {
      await worker.tagRecv(span, TAG_DATA, FULL_MASK);
      await ep.tagSend(TAG_REPLY, span);
    }
  } else {
    const window = 32;
    let posted = 0;
    const inflight: Promise<unknown>[] = [];
    while (posted < iters) {
      while (inflight.length < window && posted < iters) {
        inflight.push(worker.tagRecv(span, TAG_DATA, FULL_MASK));
        posted++;
      }
      await inflight.shift();
    }
    await Promise.all(inflight);
    await ep.tagSend(TAG_REPLY, new Uint8Array(8));
  }
  // The client closes first; wait for its disconnect so no in-flight reply is cut off.
  await new Promise<void>((resolve) => {
    ep.once('error', () => resolve());
    setTimeout(resolve, 2000).unref();
  });
  await ep.close({ force: true });
  listener.close();
  region.close();
  await worker.close();
  context.close();
}

listener.once('connection', (ep) => {
  serve(ep).catch((error) => {
    console.error(`ucx-peer: ${error}`);
    process.exit(1);
  });
});
announceReady({ port: listener.port });
