// A worker's close waits for endpoints closing gracefully for a bounded time, and once: a peer that
// stopped reading never lets such a close finish (test/faults/stopped-peer-close.test.ts plays it
// over the network). Here, children stand in for endpoints.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Context, Worker } from '../../core/ucx/index.ts';
import { GRACEFUL_CLOSE_WAIT_MS } from '../../core/ucx/worker.ts';

afterEach(() => { vi.useRealTimers(); });

/** Settled yet? Lets the microtasks run, not the timers. */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  let done = false;
  void promise.then(() => { done = true; });
  for (let i = 0; i < 10; i += 1) await Promise.resolve();
  return done;
}

describe('Worker.closeChildren', () => {
  it(`waits ${GRACEFUL_CLOSE_WAIT_MS} ms for a graceful close that never ends, once; a forced one is asked of the others`, async () => {
    const context = Context.create({ config: { TLS: 'tcp' } });
    const worker = Worker.create(context);
    const forced: string[] = [];
    const stuck = { closingGracefully: true, close: () => new Promise<void>(() => {}) };
    const other = { close: (options?: { force?: boolean }) => { forced.push(String(options?.force)); return Promise.resolve(); } };
    Worker.adopt(worker, stuck);
    Worker.adopt(worker, other);
    try {
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
      const first = worker.closeChildren();
      expect(await settled(first)).toBe(false);
      vi.advanceTimersByTime(GRACEFUL_CLOSE_WAIT_MS - 1);
      expect(await settled(first)).toBe(false);
      vi.advanceTimersByTime(1);
      expect(await settled(first)).toBe(true);
      expect(forced).toEqual(['true']);
      // The second time (Worker.close after Runtime.close's own call) it does not wait again.
      expect(await settled(worker.closeChildren())).toBe(true);
      vi.useRealTimers();
    } finally {
      Worker.release(worker, stuck);
      await worker.close();
      context.close();
    }
  });
});
