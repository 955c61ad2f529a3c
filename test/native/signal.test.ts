// Many operations under one AbortSignal (a connection's receives share its signal): one abort
// listener per signal (core/abort.ts), whatever the number of operations and workers, and the
// abort still cancels every one of them. A listener per operation made n operations cost O(n²) to post (EventTarget
// looks through its listeners on every add).
import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { GdrpcError } from '../../core/errors.ts';
import { Worker } from '../../core/ucx/index.ts';
import { EXACT, localSide, TRANSPORTS } from './local.ts';

const local = localSide(TRANSPORTS.tcp);

const codeOf = (operation: Promise<unknown>): Promise<string> => operation.then(() => 'OK', (error: GdrpcError) => error.code);

describe('operations under one signal', () => {
  it.each([false, true])('2,000 receives under one signal hold one listener, and its abort cancels them all (untilComplete: %s)', async (untilComplete) => {
    const stop = new AbortController();
    const receives = Array.from({ length: 2000 }, (_, i) => codeOf(local.worker.tagRecv(Buffer.alloc(8), 0x5_0000n + BigInt(i), EXACT, { signal: stop.signal, untilComplete })));
    expect(getEventListeners(stop.signal, 'abort')).toHaveLength(1);
    expect(local.worker.stats().liveRequests).toBe(2000);
    stop.abort();
    expect(new Set(await Promise.all(receives))).toEqual(new Set(['CANCELLED']));
    await expect.poll(() => local.worker.stats().liveRequests).toBe(0);
  });

  it('a signal shared by two workers has one listener; aborting it cancels on both', async () => {
    const other = Worker.create(local.context);
    try {
      const stop = new AbortController();
      const here = codeOf(local.worker.tagRecv(Buffer.alloc(8), 0x6_0000n, EXACT, { signal: stop.signal }));
      const there = codeOf(other.tagRecv(Buffer.alloc(8), 0x6_0001n, EXACT, { signal: stop.signal }));
      expect(getEventListeners(stop.signal, 'abort')).toHaveLength(1);
      stop.abort();
      expect([await here, await there]).toEqual(['CANCELLED', 'CANCELLED']);
      expect(getEventListeners(stop.signal, 'abort')).toHaveLength(0);
    } finally {
      await other.close();
    }
  });

  it('operations posted later join the same listener; an aborted signal refuses new ones at once', async () => {
    const stop = new AbortController();
    const first = codeOf(local.worker.tagRecv(Buffer.alloc(8), 0x7_0001n, EXACT, { signal: stop.signal }));
    await new Promise((resolve) => setTimeout(resolve, 10));
    const later = codeOf(local.worker.tagRecv(Buffer.alloc(8), 0x7_0002n, EXACT, { signal: stop.signal }));
    expect(getEventListeners(stop.signal, 'abort')).toHaveLength(1);
    stop.abort();
    expect([await first, await later]).toEqual(['CANCELLED', 'CANCELLED']);
    expect(await codeOf(local.worker.tagRecv(Buffer.alloc(8), 0x7_0003n, EXACT, { signal: stop.signal }))).toBe('CANCELLED');
    await expect.poll(() => local.worker.stats().liveRequests).toBe(0);
  });
});
