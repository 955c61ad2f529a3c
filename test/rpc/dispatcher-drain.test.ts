// The dispatcher's collection of tensor payloads that arrived before any receive: while a control
// message (perhaps the frame announcing them) still waits to be read, the payloads are left in
// UCX's queue, a bounded number of passes, so that a frame announcing many tensors is not beaten
// by its own payloads (they would count against the limit of unannounced payloads). A fake worker
// holds the queue, so that the order of events is the test's.
import { afterEach, describe, expect, it } from 'vitest';
import { Dispatcher, type FrameSink } from '../../core/rpc/runtime/dispatcher.ts';
import type { Worker } from '../../core/ucx/index.ts';
import { CONTROL_BIT, dataTag, type ConnectionKey } from '../../core/wire/tag.ts';

interface Queued { senderTag: bigint; length: number }

/** The part of a Worker the dispatcher uses, over a queue of unexpected messages. */
class FakeWorker {
  closed = false;
  readonly queue: Queued[] = [];
  tagRecv(_buffer: unknown, _tag: bigint, _mask: bigint, options: { signal: AbortSignal }): Promise<never> {
    return new Promise((_, reject) => options.signal.addEventListener('abort', () => reject(new Error('stopped'))));
  }
  tagProbe(tag: bigint, mask: bigint, options?: { remove: boolean }): (Queued & { taken?: number }) | null {
    const at = this.queue.findIndex((m) => (m.senderTag & mask) === (tag & mask));
    if (at < 0) return null;
    const message = this.queue[at]!;
    if (options?.remove !== true) return message;
    this.queue.splice(at, 1);
    return { ...message, taken: at + 1 };
  }
}

let dispatcher: Dispatcher | undefined;
afterEach(() => dispatcher?.stop());

function setUp(): { worker: FakeWorker; key: ConnectionKey; strays: bigint[] } {
  const worker = new FakeWorker();
  dispatcher = new Dispatcher(worker as unknown as Worker, 4096);
  const strays: bigint[] = [];
  const sink: FrameSink = {
    onFrame: () => {},
    onOversized: () => {},
    onStrayData: (message: { senderTag: bigint }) => { strays.push(message.senderTag); },
  } as unknown as FrameSink;
  const key = dispatcher.register(sink);
  return { worker, key, strays };
}

describe('Dispatcher.drainPayloads', () => {
  it('takes payloads at once when no control message waits', () => {
    const { worker, key, strays } = setUp();
    worker.queue.push({ senderTag: dataTag(key, 1), length: 32 }, { senderTag: dataTag(key, 2), length: 32 });
    dispatcher!.drainPayloads();
    expect(strays).toEqual([dataTag(key, 1), dataTag(key, 2)]);
    expect(worker.queue).toEqual([]);
  });

  it('leaves them while a control message waits, and takes them once the loop has read it', () => {
    const { worker, key, strays } = setUp();
    const frame = { senderTag: CONTROL_BIT | key.value, length: 100 };
    worker.queue.push(frame, { senderTag: dataTag(key, 7), length: 32 });
    dispatcher!.drainPayloads();
    expect(strays).toEqual([]);
    expect(worker.queue).toHaveLength(2);
    worker.queue.splice(0, 1);  // the control loop received the frame
    dispatcher!.drainPayloads();
    expect(strays).toEqual([dataTag(key, 7)]);
  });

  it('waits a bounded number of passes: a control message that is never read does not shelter strays', () => {
    const { worker, key, strays } = setUp();
    worker.queue.push({ senderTag: CONTROL_BIT | key.value, length: 100 }, { senderTag: dataTag(key, 3), length: 32 });
    let passes = 0;
    while (strays.length === 0 && passes < 100) {
      dispatcher!.drainPayloads();
      passes += 1;
    }
    expect(strays).toEqual([dataTag(key, 3)]);
    expect(passes).toBe(9);
  });
});
