import { getEventListeners } from 'node:events';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { cuda } from '../../core/cuda.ts';
import { Context, nativeStats } from '../../core/ucx/index.ts';
import { PoolShare, Tensor, TensorPool } from '../../core/tensor/index.ts';
import { OVERFLOW_LIVE_WARNING } from '../../core/tensor/pool.ts';
import { Code, GdrpcError } from '../../core/errors.ts';
import { expectCode } from './expect-error.ts';

/** A share that counts how often it is asked whether it admits an allocation. */
class CountingShare extends PoolShare {
  asked = 0;
  override admits(bytes: number): boolean {
    this.asked += 1;
    return super.admits(bytes);
  }
}

let context: Context;
const pools: TensorPool[] = [];

/** A host pool that is force-closed after the test, whatever happened. */
function hostPool(bytes: number, allowOverflow = false): TensorPool {
  const pool = TensorPool.create(context, { device: 'cpu', bytes, allowOverflow });
  pools.push(pool);
  return pool;
}

beforeAll(() => {
  context = Context.create();
});
afterEach(() => {
  for (const pool of pools.splice(0)) pool.close({ force: true });
});
afterAll(() => {
  context.close();
});

describe('TensorPool (host)', () => {
  it('maps its whole arena once as host memory and carves tensors inside it', () => {
    const regionsBefore = nativeStats().regions;
    const pool = hostPool(4096);
    expect(nativeStats().regions).toBe(regionsBefore + 1);
    const region = pool.region!;
    expect(region.memoryType).toBe('host');
    expect(region.length).toBeGreaterThanOrEqual(4096);
    expect(pool.staged).toBe(false);

    const t = pool.allocate([3, 4], 'f32');
    expect(t.pool).toBe(pool);
    const span = t.span()!;
    expect(span.region).toBe(region);
    expect(span.length).toBe(48);
    expect(span.offset + span.length).toBeLessThanOrEqual(region.length);
    expect(region.address + BigInt(span.offset)).toBe(t.address);
    expect(t.address % 256n).toBe(0n);
    // The tensor's bytes are the region's bytes, not a copy.
    (t.toArray() as Float32Array).set([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    const inRegion = new Float32Array(region.buffer!, span.offset, 12);
    expect(Array.from(inRegion)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    expect(nativeStats().regions).toBe(regionsBefore + 1);  // carving registers nothing
    t.release();
  });

  it('counts use, returns blocks on release, and release is idempotent', () => {
    const pool = hostPool(1024);
    expect(pool.stats()).toEqual({ device: 'cpu', capacity: 1024, used: 0, liveTensors: 0, overflowRegistrations: 0, waiting: 0, waitingBytes: 0, waited: 0 });
    const a = pool.allocate([10], 'u8');
    const b = pool.allocate([300], 'u8');
    expect(pool.stats()).toMatchObject({ used: 768, liveTensors: 2 });
    const aOffset = a.span()!.offset;
    a.release();
    a.release();
    expect(pool.stats()).toMatchObject({ used: 512, liveTensors: 1 });
    const c = pool.allocate([256], 'u8');
    expect(c.span()!.offset).toBe(aOffset);  // first fit reuses a's block
    b.release();
    c.release();
    expect(pool.stats()).toMatchObject({ used: 0, liveTensors: 0 });
    expectCode(() => a.span(), 'FAILED_PRECONDITION', /released/);
  });

  it('coalesces freed neighbours so a larger tensor fits again', () => {
    const pool = hostPool(1024);
    const blocks = [0, 1, 2, 3].map(() => pool.allocate([64], 'f32'));  // 256 bytes each
    expectCode(() => pool.allocate([1], 'u8'), 'RESOURCE_EXHAUSTED');
    blocks[2]!.release();
    blocks[1]!.release();
    const big = pool.allocate([128], 'f32');  // 512 bytes: only fits in the merged range
    expect(big.span()!.offset).toBe(blocks[0]!.span()!.offset + 256);
    big.release();
    blocks[0]!.release();
    blocks[3]!.release();
    const all = pool.allocate([256], 'f32');
    expect(all.byteLength).toBe(1024);
    all.release();
  });

  it('throws RESOURCE_EXHAUSTED with the numbers when full', () => {
    const pool = hostPool(512);
    const t = pool.allocate([300], 'u8');
    const error = expectCode(() => pool.allocate([300], 'u8'), 'RESOURCE_EXHAUSTED', /300 bytes requested, 0 of 512 free/);
    expect(error.details).toMatchObject({ device: 'cpu', requested: 300, capacity: 512, used: 512 });
    expect(pool.stats()).toMatchObject({ liveTensors: 1, overflowRegistrations: 0 });
    t.release();
  });

  it('with allowOverflow registers a one-off region, counts it and warns once', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    try {
      const pool = hostPool(256, true);
      const inPool = pool.allocate([256], 'u8');
      const regionsBefore = nativeStats().regions;
      const extra = pool.allocate([100], 'u8');
      const extra2 = pool.allocate([3], 'f64');
      expect(pool.stats()).toMatchObject({ used: 256, liveTensors: 3, overflowRegistrations: 2 });
      expect(nativeStats().regions).toBe(regionsBefore + 2);
      const span = extra.span()!;
      expect(span.region).not.toBe(pool.region);
      expect(span.region.memoryType).toBe('host');
      expect(span.length).toBe(100);
      expect(extra.pool).toBe(pool);
      extra.bytes().fill(7);
      expect(new Uint8Array(span.region.buffer!, span.offset, 100).every((b) => b === 7)).toBe(true);
      extra.release();
      extra2.release();
      extra.release();
      expect(nativeStats().regions).toBe(regionsBefore);
      expect(pool.stats()).toMatchObject({ liveTensors: 1, overflowRegistrations: 2 });
      inPool.release();
      await new Promise((resolve) => setImmediate(resolve));
      const ours = warnings.filter((w) => (w as any).code === 'GDRPC_POOL_OVERFLOW');
      expect(ours).toHaveLength(1);
      expect(ours[0]!.message).toMatch(/overflowed/);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it(`warns when ${OVERFLOW_LIVE_WARNING} tensors allocated past the pool are alive at once (results nobody releases), then at each doubling; released ones do not count`, async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error): void => { warnings.push(w); };
    process.on('warning', onWarning);
    try {
      const pool = hostPool(256, true);
      const inPool = pool.allocate([256], 'u8');
      const unreleased = (): Error[] => warnings.filter((w) => (w as { code?: string }).code === 'GDRPC_POOL_UNRELEASED');
      const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
      // Allocated and released one at a time: never more than one alive, no warning.
      for (let i = 0; i < OVERFLOW_LIVE_WARNING + 10; i += 1) pool.allocate([8], 'u8').release();
      await settle();
      expect(unreleased()).toHaveLength(0);
      const kept = Array.from({ length: OVERFLOW_LIVE_WARNING }, () => pool.allocate([8], 'u8'));
      await settle();
      expect(unreleased()).toHaveLength(1);
      expect(unreleased()[0]!.message).toMatch(new RegExp(`${OVERFLOW_LIVE_WARNING} tensors allocated past the pool are alive.*release\\(\\)`));
      // Not again until twice as many.
      for (let i = 0; i < OVERFLOW_LIVE_WARNING - 1; i += 1) kept.push(pool.allocate([8], 'u8'));
      await settle();
      expect(unreleased()).toHaveLength(1);
      kept.push(pool.allocate([8], 'u8'));
      await settle();
      expect(unreleased()).toHaveLength(2);
      for (const tensor of kept) tensor.release();
      expect(pool.stats().liveTensors).toBe(1);
      inPool.release();
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('gives zero-sized tensors without using arena space', () => {
    const pool = hostPool(256);
    const full = pool.allocate([256], 'u8');
    const empty = pool.allocate([4, 0], 'f32');
    expect(empty.byteLength).toBe(0);
    expect(pool.stats()).toMatchObject({ used: 256, liveTensors: 2 });
    empty.release();
    full.release();
    expect(pool.stats().liveTensors).toBe(0);
  });

  it('zeros() from a pool clears reused bytes; empty()/to() use the pool', () => {
    const pool = hostPool(1024);
    const dirty = pool.allocate([64], 'u32');
    dirty.bytes().fill(0xff);
    const dirtyOffset = dirty.span()!.offset;
    dirty.release();
    const z = Tensor.zeros([64], 'u32', { pool });
    expect(z.span()!.offset).toBe(dirtyOffset);  // same bytes, so zeros() really had to clear them
    expect(z.bytes().every((b) => b === 0)).toBe(true);
    const source = Tensor.fromArray(new Float64Array([1, 2, 3]));
    const copy = source.to('cpu', { pool });
    expect(copy.pool).toBe(pool);
    expect(copy.equals(source)).toBe(true);
    expect(pool.stats().liveTensors).toBe(2);
    expectCode(() => Tensor.empty([1], 'u8', { pool, device: 'cuda:0' }), 'INVALID_ARGUMENT', /does not match the pool/);
    z.release();
    copy.release();
  });

  it('close() refuses while tensors are live; force releases them; all regions go', () => {
    const regionsBefore = nativeStats().regions;
    const pool = TensorPool.create(context, { device: 'cpu', bytes: 4096, allowOverflow: true });
    const a = pool.allocate([16], 'u8');
    const b = pool.allocate([8192], 'u8');  // overflow
    expect(nativeStats().regions).toBe(regionsBefore + 2);
    expectCode(() => pool.close(), 'FAILED_PRECONDITION', /2 live tensor/);
    expect(pool.closed).toBe(false);
    pool.close({ force: true });
    expect(pool.closed).toBe(true);
    expect(a.released && b.released).toBe(true);
    expectCode(() => a.bytes(), 'FAILED_PRECONDITION', /released/);
    expect(nativeStats().regions).toBe(regionsBefore);
    a.release();
    pool.close();
    expectCode(() => pool.allocate([1], 'u8'), 'FAILED_PRECONDITION', /closed/);
  });

  it.skipIf(cuda.available())('refuses a CUDA pool or a pinned host pool without CUDA, saying why', () => {
    expectCode(() => TensorPool.create(context, { device: 'cuda:0', bytes: 4096 }), 'FAILED_PRECONDITION', /CUDA is unavailable/);
    expectCode(() => TensorPool.create(context, { device: 'cpu', bytes: 4096, pinned: true }), 'FAILED_PRECONDITION', /CUDA is unavailable/);
  });

  it('rejects bad options', () => {
    expectCode(() => TensorPool.create(context, { device: 'cpu', bytes: 0 }), 'INVALID_ARGUMENT', /positive safe integer/);
    expectCode(() => TensorPool.create(context, { device: 'cpu', bytes: -5 }), 'INVALID_ARGUMENT');
    expectCode(() => TensorPool.create(context, { device: 'gpu' as any, bytes: 256 }), 'INVALID_ARGUMENT', /pool device/);
    expectCode(() => TensorPool.create(context, undefined as any), 'INVALID_ARGUMENT');
    expectCode(() => TensorPool.create(context, { device: 'cuda:0', bytes: 256, pinned: true }), 'INVALID_ARGUMENT', /pinned applies to 'cpu'/);
  });
});

describe('TensorPool.allocateWhenFree (memory admission that waits)', () => {
  const GRAIN = 256;
  const rejection = (promise: Promise<unknown>): Promise<GdrpcError> =>
    promise.then(() => { throw new Error('expected a rejection'); }, (error: unknown) => error as GdrpcError);

  it('serves at once when a block fits, else waits for a release', async () => {
    const pool = hostPool(4 * GRAIN);
    const a = await pool.allocateWhenFree([3 * GRAIN], 'u8', { maxWaitMs: 60_000 });
    let served: Tensor | undefined;
    const waiting = pool.allocateWhenFree([2 * GRAIN], 'u8', { maxWaitMs: 60_000 }).then((t) => { served = t; return t; });
    await new Promise((resolve) => setImmediate(resolve));
    expect(served).toBeUndefined();
    expect(pool.stats().waiting).toBe(1);
    a.release();
    const b = await waiting;
    expect(b.byteLength).toBe(2 * GRAIN);
    expect(pool.stats()).toMatchObject({ waiting: 0, used: 2 * GRAIN });
    b.release();
  });

  it('serves waiters first come, first served; a small one does not overtake a large one', async () => {
    const pool = hostPool(4 * GRAIN);
    const held = [await pool.allocateWhenFree([2 * GRAIN], 'u8', { maxWaitMs: 60_000 }), await pool.allocateWhenFree([2 * GRAIN], 'u8', { maxWaitMs: 60_000 })];
    const order: string[] = [];
    const large = pool.allocateWhenFree([4 * GRAIN], 'u8', { maxWaitMs: 60_000 }).then((t) => { order.push('large'); return t; });
    const small = pool.allocateWhenFree([GRAIN], 'u8', { maxWaitMs: 60_000 }).then((t) => { order.push('small'); return t; });
    // A synchronous allocate does not take blocks from those waiting either.
    expectCode(() => pool.allocate([GRAIN], 'u8'), Code.RESOURCE_EXHAUSTED, /waiting/);
    held[0]!.release();
    await new Promise((resolve) => setImmediate(resolve));
    expect(order).toEqual([]);  // 2 blocks free: the small one would fit, but the large one is first
    held[1]!.release();
    (await large).release();
    (await small).release();
    expect(order).toEqual(['large', 'small']);
  });

  it('fails RESOURCE_EXHAUSTED at once when the request can never fit', async () => {
    const pool = hostPool(4 * GRAIN);
    const error = await rejection(pool.allocateWhenFree([8 * GRAIN], 'u8', { maxWaitMs: 60_000 }));
    expect(error.code).toBe(Code.RESOURCE_EXHAUSTED);
    expect(error.message).toMatch(/never fit/);
    expect(pool.stats().waiting).toBe(0);
  });

  it('fails RESOURCE_EXHAUSTED after maxWaitMs, and the waiters behind it move up', async () => {
    const pool = hostPool(4 * GRAIN);
    const a = await pool.allocateWhenFree([3 * GRAIN], 'u8', { maxWaitMs: 60_000 });
    const expired = rejection(pool.allocateWhenFree([2 * GRAIN], 'u8', { maxWaitMs: 20 }));
    const error = await expired;
    expect(error.code).toBe(Code.RESOURCE_EXHAUSTED);
    expect(error.message).toMatch(/waited \d+ ms/);
    expect(error.details).toMatchObject({ requested: 2 * GRAIN, capacity: 4 * GRAIN });
    expect(pool.stats().waiting).toBe(0);
    a.release();
  });

  it('an aborted signal ends the wait with its reason and takes nothing', async () => {
    const pool = hostPool(4 * GRAIN);
    const a = await pool.allocateWhenFree([4 * GRAIN], 'u8', { maxWaitMs: 60_000 });
    const stop = new AbortController();
    const waiting = rejection(pool.allocateWhenFree([GRAIN], 'u8', { maxWaitMs: 60_000, signal: stop.signal }));
    const reason = new GdrpcError(Code.DEADLINE_EXCEEDED, 'deadline');
    stop.abort(reason);
    expect(await waiting).toBe(reason);
    a.release();
    expect(pool.stats()).toMatchObject({ waiting: 0, used: 0, liveTensors: 0 });
  });

  it('500 waits under one signal hold one abort listener; the abort ends each with its reason', async () => {
    const pool = hostPool(4 * GRAIN);
    const a = await pool.allocateWhenFree([4 * GRAIN], 'u8', { maxWaitMs: 60_000 });
    const stop = new AbortController();
    const waits = Array.from({ length: 500 }, () => rejection(pool.allocateWhenFree([GRAIN], 'u8', { maxWaitMs: 60_000, signal: stop.signal })));
    expect(getEventListeners(stop.signal, 'abort')).toHaveLength(1);
    expect(pool.stats().waiting).toBe(500);
    const reason = new GdrpcError(Code.CANCELLED, 'batch stopped');
    stop.abort(reason);
    expect(new Set(await Promise.all(waits))).toEqual(new Set([reason]));
    a.release();
    expect(pool.stats()).toMatchObject({ waiting: 0, used: 0, liveTensors: 0 });
  });

  it('a claimant over its share steps aside for another claimant; alone it may use the whole pool', async () => {
    const pool = hostPool(4 * GRAIN);
    const greedy = new PoolShare(2 * GRAIN);
    const other = new PoolShare(2 * GRAIN);
    // Alone, greedy is not held to its share: the whole pool is its.
    const held = [
      await pool.allocateWhenFree([2 * GRAIN], 'u8', { maxWaitMs: 60_000, share: greedy }),
      await pool.allocateWhenFree([2 * GRAIN], 'u8', { maxWaitMs: 60_000, share: greedy }),
    ];
    expect(greedy.held).toBe(4 * GRAIN);
    const order: string[] = [];
    const greedyNext = pool.allocateWhenFree([2 * GRAIN], 'u8', { maxWaitMs: 60_000, share: greedy }).then((t) => { order.push('greedy'); return t; });
    const otherNext = pool.allocateWhenFree([2 * GRAIN], 'u8', { maxWaitMs: 60_000, share: other }).then((t) => { order.push('other'); return t; });
    expect(pool.stats().waiting).toBe(2);
    // Greedy came first, but is over its share while other waits under its own: other goes first.
    held[0]!.release();
    const o = await otherNext;
    expect(order).toEqual(['other']);
    held[1]!.release();
    const g = await greedyNext;
    expect(order).toEqual(['other', 'greedy']);
    expect(greedy.held).toBe(2 * GRAIN);
    expect(other.held).toBe(2 * GRAIN);
    o.release();
    g.release();
    expect(greedy.held + other.held).toBe(0);
  });

  it('20,000 waiters of a claimant over its share: a release serves another claimant without walking them', async () => {
    const pool = hostPool(4 * GRAIN);
    const greedy = new CountingShare(2 * GRAIN);
    const other = new CountingShare(2 * GRAIN);
    const held = [
      await pool.allocateWhenFree([2 * GRAIN], 'u8', { maxWaitMs: 60_000, share: greedy }),
      await pool.allocateWhenFree([2 * GRAIN], 'u8', { maxWaitMs: 60_000, share: greedy }),
    ];
    // Each settles with undefined when served (its block given back at once) or with the error.
    const greedyWaits = Array.from({ length: 20_000 }, () => pool.allocateWhenFree([GRAIN], 'u8', { maxWaitMs: 60_000, share: greedy })
      .then((t) => { t.release(); return undefined; }, (error: unknown) => error as GdrpcError));
    const otherNext = pool.allocateWhenFree([GRAIN], 'u8', { maxWaitMs: 60_000, share: other });
    expect(pool.stats().waiting).toBe(20_001);
    greedy.asked = 0;
    held[0]!.release();  // serves, synchronously, whoever fits
    // Each choice asks each waiting claimant once: other, then greedy's first waiter (the earliest
    // of all once nobody under a share waits) into the grain left; a walk of the queue asked
    // greedy 20,000 times.
    expect(greedy.asked).toBeLessThan(10);
    const o = await otherNext;
    expect(other.held).toBe(GRAIN);
    expect(pool.stats().waiting).toBeLessThan(20_000);
    o.release();
    held[1]!.release();
    const outcomes = await Promise.all(greedyWaits);
    expect(outcomes.every((outcome) => outcome === undefined)).toBe(true);
    expect(pool.stats()).toMatchObject({ waiting: 0, used: 0 });
  });

  it('counts in waited only the calls that waited: one served at once past a claimant over its share is not', async () => {
    const pool = hostPool(4 * GRAIN);
    const greedy = new PoolShare(2 * GRAIN);
    const other = new PoolShare(2 * GRAIN);
    const wait = (share: PoolShare) => ({ maxWaitMs: 60_000, share });
    const held = await pool.allocateWhenFree([3 * GRAIN], 'u8', wait(greedy));
    // Greedy holds 3 grains, over its share, and waits for 2 more.
    const greedyNext = pool.allocateWhenFree([2 * GRAIN], 'u8', wait(greedy));
    expect(pool.stats()).toMatchObject({ waiting: 1, waited: 1 });
    // Other asks for the grain left: it goes ahead of greedy at once, without waiting.
    const now = await pool.allocateWhenFree([GRAIN], 'u8', wait(other));
    expect(pool.stats()).toMatchObject({ waiting: 1, waited: 1, used: 4 * GRAIN });
    now.release();
    held.release();
    (await greedyNext).release();
    expect(pool.stats()).toMatchObject({ waiting: 0, waited: 1, used: 0 });
  });

  it('a full wait queue refuses at once (maxQueuedBytes), and frees its room as waiters leave', async () => {
    const pool = hostPool(4 * GRAIN);
    const held = pool.allocate([4 * GRAIN], 'u8');
    const queue = { maxWaitMs: 60_000, maxQueuedBytes: 3 * GRAIN };
    const first = pool.allocateWhenFree([2 * GRAIN], 'u8', queue);
    const second = rejection(pool.allocateWhenFree([GRAIN], 'u8', { ...queue, maxWaitMs: 1 }));
    // Both calls wait.
    expect(pool.stats()).toMatchObject({ waiting: 2, waitingBytes: 3 * GRAIN, waited: 2 });
    // 3 grains wait already: one more byte is over the limit, refused before any wait.
    const full = await rejection(pool.allocateWhenFree([1], 'u8', queue));
    expect(full.code).toBe(Code.RESOURCE_EXHAUSTED);
    expect(full.message).toMatch(/wait queue is full: 768 bytes in 2 allocation\(s\) already wait/);
    expect(full.details).toMatchObject({ requested: 1, queuedBytes: 3 * GRAIN, queued: 2, queueLimit: 3 * GRAIN });
    // Refused before any wait: not counted.
    expect(pool.stats()).toMatchObject({ waiting: 2, waitingBytes: 3 * GRAIN, waited: 2 });
    // The second waiter's wait expires: its room is free again, and a newcomer may queue.
    expect((await second).message).toMatch(/waited \d+ ms/);
    expect(pool.stats()).toMatchObject({ waiting: 1, waitingBytes: 2 * GRAIN });
    const third = pool.allocateWhenFree([GRAIN], 'u8', queue);
    expect(pool.stats()).toMatchObject({ waiting: 2, waitingBytes: 3 * GRAIN });
    held.release();
    const [a, b] = await Promise.all([first, third]);
    // The count keeps every wait, ended or not.
    expect(pool.stats()).toMatchObject({ waiting: 0, waitingBytes: 0, used: 3 * GRAIN, waited: 3 });
    a.release();
    b.release();
    // Served at once when nothing waits ahead: no wait counted.
    const now = await pool.allocateWhenFree([GRAIN], 'u8', queue);
    expect(pool.stats().waited).toBe(3);
    now.release();
  });

  it('a claimant with nothing waiting may join a full queue; one with a waiter already may not', async () => {
    const pool = hostPool(4 * GRAIN);
    const held = pool.allocate([4 * GRAIN], 'u8');
    const flooder = new PoolShare(2 * GRAIN);
    const other = new PoolShare(2 * GRAIN);
    const queue = (share: PoolShare) => ({ maxWaitMs: 60_000, maxQueuedBytes: 2 * GRAIN, share });
    const flooded = pool.allocateWhenFree([2 * GRAIN], 'u8', queue(flooder));
    expect(flooder.waiting).toBe(1);
    // The queue is full, and the flooder already waits: refused.
    const refused = await rejection(pool.allocateWhenFree([GRAIN], 'u8', queue(flooder)));
    expect(refused.message).toMatch(/wait queue is full/);
    expect(flooder.waiting).toBe(1);
    // Another claimant is not shut out by the flooder's queue: it waits its turn.
    const fair = pool.allocateWhenFree([GRAIN], 'u8', queue(other));
    expect(other.waiting).toBe(1);
    expect(pool.stats()).toMatchObject({ waiting: 2, waitingBytes: 3 * GRAIN });
    held.release();
    const [f, o] = await Promise.all([flooded, fair]);
    expect(flooder.waiting + other.waiting).toBe(0);
    expect(flooder.held + other.held).toBe(3 * GRAIN);
    f.release();
    o.release();
  });

  it('claimants with nothing waiting queue past a full queue up to its limit again, not further', async () => {
    const pool = hostPool(8 * GRAIN);
    const held = pool.allocate([8 * GRAIN], 'u8');
    const queue = (share: PoolShare) => ({ maxWaitMs: 60_000, maxQueuedBytes: 2 * GRAIN, share });
    const waits = [pool.allocateWhenFree([2 * GRAIN], 'u8', queue(new PoolShare(8 * GRAIN)))];
    // Two more claimants with nothing waiting: past the queue's 2 grains, up to 4.
    waits.push(pool.allocateWhenFree([GRAIN], 'u8', queue(new PoolShare(8 * GRAIN))));
    waits.push(pool.allocateWhenFree([GRAIN], 'u8', queue(new PoolShare(8 * GRAIN))));
    expect(pool.stats()).toMatchObject({ waiting: 3, waitingBytes: 4 * GRAIN });
    const refused = await rejection(pool.allocateWhenFree([GRAIN], 'u8', queue(new PoolShare(8 * GRAIN))));
    expect(refused.message).toMatch(/wait queue is full/);
    held.release();
    for (const tensor of await Promise.all(waits)) tensor.release();
  });

  it("a wait counts countAs in the queue when more than its bytes (a gather's members still to come)", async () => {
    const pool = hostPool(8 * GRAIN);
    const held = pool.allocate([8 * GRAIN], 'u8');
    const queue = { maxWaitMs: 60_000, maxQueuedBytes: 4 * GRAIN };
    const gather = pool.allocateWhenFree([GRAIN], 'u8', { ...queue, countAs: 4 * GRAIN });
    expect(pool.stats()).toMatchObject({ waiting: 1, waitingBytes: 4 * GRAIN });
    const refused = await rejection(pool.allocateWhenFree([GRAIN], 'u8', queue));
    expect(refused.message).toMatch(/wait queue is full/);
    // Less than its bytes counts its bytes; undefined is left out.
    const small = pool.allocateWhenFree([GRAIN], 'u8', { maxWaitMs: 60_000, countAs: 1, maxQueuedBytes: undefined });
    expect(pool.stats()).toMatchObject({ waiting: 2, waitingBytes: 5 * GRAIN });
    held.release();
    for (const tensor of await Promise.all([gather, small])) tensor.release();
    expect(pool.stats()).toMatchObject({ waiting: 0, waitingBytes: 0 });
  });

  it('maxQueuedBytes is checked like every option', async () => {
    const pool = hostPool(4 * GRAIN);
    const error = await rejection(pool.allocateWhenFree([GRAIN], 'u8', { maxWaitMs: 10, maxQueuedBytes: -1 }));
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(error.message).toMatch(/maxQueuedBytes/);
  });

  it('allocateIfFree serves what allocateWhenFree would serve at once, answers undefined where it would wait, and throws its immediate refusals', async () => {
    const pool = hostPool(4 * GRAIN);
    const share = new PoolShare(4 * GRAIN);
    const a = pool.allocateIfFree([3 * GRAIN], 'u8', share)!;
    expect(a.byteLength).toBe(3 * GRAIN);
    expect(share.held).toBe(3 * GRAIN);
    expect(pool.allocateIfFree([2 * GRAIN], 'u8', share)).toBeUndefined();  // would wait: nothing taken, nothing queued
    expect(pool.stats()).toMatchObject({ waiting: 0, used: 3 * GRAIN, liveTensors: 1 });
    expect(pool.allocateIfFree([0], 'u8')!.byteLength).toBe(0);
    expectCode(() => pool.allocateIfFree([8 * GRAIN], 'u8'), Code.RESOURCE_EXHAUSTED, /never fit/);
    expectCode(() => pool.allocateIfFree([-1], 'u8'), Code.INVALID_ARGUMENT);
    // Someone waiting is ahead: a block that fits is still not taken from them.
    const waiting = pool.allocateWhenFree([2 * GRAIN], 'u8', { maxWaitMs: 60_000 });
    expect(pool.allocateIfFree([GRAIN], 'u8')).toBeUndefined();
    a.release();
    (await waiting).release();
    expect(share.held).toBe(0);
    pool.close({ force: true });
    expectCode(() => pool.allocateIfFree([GRAIN], 'u8'), Code.FAILED_PRECONDITION, /closed/);
  });

  it('close() fails the waiters with FAILED_PRECONDITION', async () => {
    const pool = hostPool(4 * GRAIN);
    pool.allocate([4 * GRAIN], 'u8');
    const waiting = rejection(pool.allocateWhenFree([GRAIN], 'u8', { maxWaitMs: 60_000 }));
    pool.close({ force: true });
    expect((await waiting).code).toBe(Code.FAILED_PRECONDITION);
  });
});
