// A TensorPool is one device allocation, mapped with UCX once, that tensors are carved from and
// returned to. Registration is the expensive part of a zero-copy transfer; paying it once per
// pool instead of once per call is the point. When the pool is full, a pool that allows it
// registers a one-off allocation instead: counted, and warned about once, never silent.
import { Code, GdrpcError } from '../errors.ts';
import { whenAborted } from '../abort.ts';
import { LiveList, type LiveNode } from '../live-list.ts';
import type { Context } from '../ucx/index.ts';
import { Arena } from './arena.ts';
import { parseDevice, type Device, type DeviceKind } from './device.ts';
import { checkDType, type DType } from './dtype.ts';
import { mapMemory, type MappedMemory } from './mapped-memory.ts';
import { Accept, checkOptions, invalidOption, rule, type OptionRules } from './options.ts';
import { checkShape, type ShapeInfo } from './shape.ts';
import { Storage } from './storage.ts';
import { WaitQueue } from './wait-queue.ts';
import { markPool, Tensor, type TensorPoolLike, type TensorPoolStats } from './tensor.ts';

export type { TensorPoolStats };

/** Options of TensorPool.create. */
export interface TensorPoolOptions {
  device: Device;
  /** Arena size; rounded up to 256 bytes. */
  bytes: number;
  /** When full, register a one-off allocation instead of failing (counted in stats). */
  allowOverflow?: boolean;
  /** 'cpu' pools only: page-locked memory (cuMemHostAlloc), for staging to and from GPUs; needs CUDA. */
  pinned?: boolean;
}

/** A claimant's share of pools (a server gives one to each connection): while it holds `limit`
 *  bytes or more, its waiting allocations step aside for those of claimants under their share.
 *  Alone, it may use the whole pool (fairness only matters when someone else waits). */
export class PoolShare {
  /** Bytes held now by this claimant's live pool tensors. */
  held = 0;
  /** This claimant's allocations waiting in a pool's queue. */
  waiting = 0;
  constructor(readonly limit: number) {}
  /** Whether an allocation of `bytes` may be served now. */
  admits(bytes: number): boolean { return this.held === 0 || this.held + bytes <= this.limit; }
}

/** Options of TensorPool.allocateWhenFree. */
export interface PoolWaitOptions {
  /** Longest wait for blocks to be freed; RESOURCE_EXHAUSTED after it. */
  maxWaitMs: number;
  /** Ends the wait early; the signal's reason is thrown. */
  signal?: AbortSignal;
  /** The claimant the bytes are counted against (fairness between claimants). */
  share?: PoolShare;
  /** Bytes the queue of waiting allocations may hold, this one included: over it RESOURCE_EXHAUSTED
   *  at once (a fast refusal instead of a long wait behind others). A claimant with nothing
   *  waiting may join past it, so one claimant filling the queue cannot shut others out, while
   *  the queue holds less than twice it. Unbounded when left out. */
  maxQueuedBytes?: number;
  /** What this wait counts in the queue when more than its own bytes: a gather's members still
   *  to be allocated, one after the other, whose payload the receiver holds whole meanwhile (a
   *  helper session's gathers of 128 members counted one member each and held 512 MiB of eager
   *  payloads against a 16 MiB queue). */
  countAs?: number;
}

const WAIT_OPTIONS: OptionRules<PoolWaitOptions> = {
  maxWaitMs: Accept.ms, signal: Accept.signal, share: rule('a PoolShare', (value) => value instanceof PoolShare),
  maxQueuedBytes: Accept.bytes, countAs: Accept.bytes,
};

interface Waiter {
  bytes: number;
  share: PoolShare | undefined;
  /** Hands it `storage`; it leaves the queue. */
  serve(storage: Storage<TensorPool>): void;
  /** Ends its wait with `error`; it leaves the queue. */
  fail(error: unknown): void;
}

/** Allocations past a pool alive at once that warn (GDRPC_POOL_UNRELEASED), then each doubling. */
export const OVERFLOW_LIVE_WARNING = 1024;

/** A per-device arena mapped with UCX once; tensors are carved from it and returned on release. */
export class TensorPool implements TensorPoolLike {
  readonly context: Context;
  readonly device: Device;
  readonly allowOverflow: boolean;
  readonly pinned: boolean;
  readonly #where: DeviceKind;
  readonly #arena: Arena;
  readonly #memory: MappedMemory;
  /** Its tensors' storage not yet released (a list, not a Set: core/live-list.ts says why). */
  readonly #live = new LiveList<Storage<TensorPool>>();
  /** allocateWhenFree calls waiting for blocks (wait-queue.ts). */
  readonly #waiters = new WaitQueue<Waiter>();
  /** Bytes the waiters ask for, together. */
  #queuedBytes = 0;
  /** allocateWhenFree calls that have waited so far (stats().waited). */
  #waited = 0;
  #overflowRegistrations = 0;
  /** Allocations past the pool alive now, and the count that warns next (doubling). */
  #overflowLive = 0;
  #overflowWarnAt = OVERFLOW_LIVE_WARNING;
  #closed = false;

  private constructor(context: Context, device: Device, where: DeviceKind, arena: Arena, memory: MappedMemory,
    options: TensorPoolOptions) {
    this.context = context;
    this.device = device;
    this.#where = where;
    this.#arena = arena;
    this.#memory = memory;
    this.allowOverflow = options.allowOverflow === true;
    this.pinned = options.pinned === true;
    markPool(this);
  }

  /** Allocates `bytes` on `device` and maps all of it with UCX. */
  static create(context: Context, options: TensorPoolOptions): TensorPool {
    if (typeof options !== 'object' || options === null) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, 'TensorPool.create: options { device, bytes } are required');
    }
    const where = parseDevice(options.device, 'pool device');
    const bytes: unknown = options.bytes;
    if (typeof bytes !== 'number' || !Number.isSafeInteger(bytes) || bytes <= 0) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `pool bytes must be a positive safe integer, got ${String(bytes)}`);
    }
    for (const flag of ['allowOverflow', 'pinned'] as const) {
      if (options[flag] !== undefined && typeof options[flag] !== 'boolean') throw invalidOption(`TensorPoolOptions.${flag}`, options[flag], Accept.boolean.expected);
    }
    if (options.pinned === true && where.kind !== 'cpu') {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `pinned applies to 'cpu' pools, not ${options.device}`);
    }
    const arena = new Arena(bytes);
    const memory = mapMemory(context, where, arena.capacity, options.pinned === true);
    return new TensorPool(context, options.device, where, arena, memory, options);
  }

  /** The UCX region mapping the whole arena; undefined when the pool is staged. */
  get region() { return this.#memory.region; }
  /** True when UCX could not map this pool's memory as its own type: movers must stage it through host memory. */
  get staged(): boolean { return this.#memory.stagingReason !== undefined; }
  /** Why the pool is staged. */
  get stagingReason(): string | undefined { return this.#memory.stagingReason; }
  get closed(): boolean { return this.#closed; }

  /** A tensor from the arena; RESOURCE_EXHAUSTED when no free block fits (unless allowOverflow).
   *  It does not take blocks that allocateWhenFree callers are waiting for. */
  allocate(shape: number[], dtype: DType): Tensor {
    if (this.#closed) throw new GdrpcError(Code.FAILED_PRECONDITION, `tensor pool on ${this.device} is closed`);
    const info = checkShape(shape, checkDType(dtype));
    const storage = info.byteLength === 0
      ? this.#storageAt(this.#memory, 0, 0, () => {})  // takes no arena space; any aligned address will do
      : (this.#waiters.size === 0 ? this.#carve(info.byteLength, undefined) : undefined) ?? this.#overflow(info.byteLength);
    return new Tensor(dtype, info, storage);
  }

  /** A tensor from the arena, waiting (first come, first served) for live tensors to be released
   *  when none fits now. RESOURCE_EXHAUSTED at once when the request can never fit or the queue is
   *  full (`maxQueuedBytes`), or when `maxWaitMs` passes; the signal's reason when it aborts first. A pool that allows overflow
   *  never waits (see allocate). */
  allocateWhenFree(shape: number[], dtype: DType, options: PoolWaitOptions): Promise<Tensor> {
    try {
      checkOptions('PoolWaitOptions', options, WAIT_OPTIONS);
      // Required: a timer of undefined ms fires at once.
      if (options?.maxWaitMs === undefined) throw invalidOption('PoolWaitOptions.maxWaitMs', undefined, Accept.ms.expected);
      const share = options.share;
      const now = this.#serveNow(shape, dtype, share, () => options.signal?.throwIfAborted());
      if (now instanceof Tensor) return Promise.resolve(now);
      const { info, bytes } = now;
      const limit = options.maxQueuedBytes;
      const counted = Math.max(bytes, options.countAs ?? 0);
      // A claimant with nothing waiting may queue past the limit, so that one filling the queue
      // cannot shut the others out, but only up to the limit again: beyond it every claimant's
      // one tensor added up (a peer's eager payloads wait with them, whole: 8 connections of
      // 120 MiB held 960 MiB past a 128 MiB queue, a helper session's attack).
      if (limit !== undefined && this.#queuedBytes + counted > limit && (share === undefined || share.waiting > 0 || this.#queuedBytes + counted > 2 * limit)) {
        throw this.#exhausted(bytes, `the wait queue is full: ${this.#queuedBytes} bytes in ${this.#waiters.size} allocation(s) already wait`,
          { queuedBytes: this.#queuedBytes, queued: this.#waiters.size, queueLimit: limit });
      }
      return this.#wait(bytes, counted, options).then((storage) => new Tensor(dtype, info, storage));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** @internal What allocateWhenFree gives without waiting: a tensor when one is served at once
   *  (nobody waits ahead and it fits, 0 bytes, or overflow allowed), undefined when the caller
   *  would wait; throws what allocateWhenFree rejects with at once. A server tries this before it
   *  makes the call's AbortSignal, which only a wait needs (an AbortSignal costs microseconds). */
  allocateIfFree(shape: number[], dtype: DType, share?: PoolShare): Tensor | undefined {
    const now = this.#serveNow(shape, dtype, share);
    return now instanceof Tensor ? now : undefined;
  }

  /** allocateWhenFree's and allocateIfFree's path without a wait: FAILED_PRECONDITION once closed,
   *  the shape and dtype checked, a tensor at once for 0 bytes or a pool that overflows,
   *  RESOURCE_EXHAUSTED for what can never fit; then `ready` (before anything is carved), and a
   *  tensor carved now when nobody waits ahead and it fits. Else what a wait for it needs. */
  #serveNow(shape: number[], dtype: DType, share: PoolShare | undefined, ready?: () => void): Tensor | { info: ShapeInfo; bytes: number } {
    if (this.#closed) throw new GdrpcError(Code.FAILED_PRECONDITION, `tensor pool on ${this.device} is closed`);
    const info = checkShape(shape, checkDType(dtype));
    const bytes = info.byteLength;
    if (bytes === 0 || this.allowOverflow) return this.allocate(shape, dtype);
    if (bytes > this.#arena.capacity) throw this.#exhausted(bytes, 'it can never fit');
    ready?.();
    const now = this.#waiters.size === 0 ? this.#carve(bytes, share) : undefined;
    return now === undefined ? { info, bytes } : new Tensor(dtype, info, now);
  }

  /** Waits for `bytes`, counting `counted` in the queue meanwhile. */
  #wait(bytes: number, counted: number, options: PoolWaitOptions): Promise<Storage<TensorPool>> {
    const { signal, share, maxWaitMs } = options;
    const started = Date.now();
    return new Promise<Storage<TensorPool>>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      let unlisten: (() => void) | undefined;
      const stopWaiting = (): void => {
        if (this.#waiters.delete(waiter)) {
          this.#queuedBytes -= counted;
          if (share !== undefined) share.waiting -= 1;
        }
        clearTimeout(timer);
        unlisten?.();
      };
      const leave = (error: unknown): void => {
        if (!this.#waiters.has(waiter)) return;
        waiter.fail(error);
        this.#serve();  // a waiter that leaves the head may unblock those behind it
      };
      const onAbort = (): void => leave(signal!.reason);
      const waiter: Waiter = {
        bytes, share,
        serve: (storage) => { stopWaiting(); resolve(storage); },
        fail: (error) => { stopWaiting(); reject(error); },
      };
      this.#waiters.push(waiter);
      this.#queuedBytes += counted;
      if (share !== undefined) share.waiting += 1;
      // Those ahead may all be claimants over their share: this one may go now.
      this.#serve();
      if (!this.#waiters.has(waiter)) return;
      // Not served in this tick: this call waits.
      this.#waited += 1;
      timer = setTimeout(() => {
        const waitedMs = Date.now() - started;
        leave(this.#exhausted(bytes, `waited ${waitedMs} ms for blocks to be freed`, { waitedMs }));
      }, maxWaitMs);
      // One listener for every waiter under a signal (core/abort.ts).
      if (signal !== undefined) unlisten = whenAborted(signal, onAbort);
    });
  }

  /** Hands freed blocks to waiters in arrival order, those of claimants over their share after
   *  everyone else's, each claimant's own in its order; nothing overtakes the waiter whose turn it
   *  is and that does not fit yet. */
  #serve(): void {
    for (;;) {
      const waiter = this.#waiters.next();
      if (waiter === undefined) return;
      const storage = this.#carve(waiter.bytes, waiter.share);
      if (storage === undefined) return;
      waiter.serve(storage);  // leaves the queue
    }
  }

  #carve(byteLength: number, share: PoolShare | undefined): Storage<TensorPool> | undefined {
    const offset = this.#arena.allocate(byteLength);
    if (offset === undefined) return undefined;
    if (share !== undefined) share.held += byteLength;
    return this.#storageAt(this.#memory, offset, byteLength, () => {
      this.#arena.free(offset);
      if (share !== undefined) share.held -= byteLength;
      if (this.#waiters.size > 0) this.#serve();
    });
  }

  /** The pool's own account (the RPC runtime rewords it to say whose pool and which option). */
  #exhausted(byteLength: number, why: string, extra: Record<string, unknown> = {}): GdrpcError {
    const { capacity, used, largestFree } = this.#arena;
    return new GdrpcError(Code.RESOURCE_EXHAUSTED,
      `tensor pool on ${this.device} is exhausted: ${byteLength} bytes requested, ${capacity - used} of ${capacity} free, largest free block ${largestFree}${why ? `; ${why}` : ''} ` +
      '(a larger pool bytes, or allowOverflow: true, avoids this)',
      { details: { device: this.device, requested: byteLength, capacity, used, largestFree, ...extra } });
  }

  #overflow(byteLength: number): Storage<TensorPool> {
    if (!this.allowOverflow) {
      throw this.#exhausted(byteLength, this.#waiters.size > 0 ? `${this.#waiters.size} allocation(s) waiting` : '');
    }
    const memory = mapMemory(this.context, this.#where, byteLength, this.pinned);
    this.#overflowRegistrations++;
    if (this.#overflowRegistrations === 1) {
      process.emitWarning(`tensor pool on ${this.device} (${this.#arena.capacity} bytes) overflowed: ` +
        `registering ${byteLength} bytes per allocation; make the pool larger`, { code: 'GDRPC_POOL_OVERFLOW' });
    }
    this.#overflowLive++;
    if (this.#overflowLive >= this.#overflowWarnAt) {
      // Each of them is a registration of its own: tensors nobody releases (results a caller
      // received and dropped) keep theirs for the process's life, and a service grows without
      // bound (helper 57: RSS 112 -> 648 MB over 2,000 calls of 256 KiB results).
      process.emitWarning(`tensor pool on ${this.device}: ${this.#overflowLive} tensors allocated past the pool are alive; ` +
        'a tensor is its holder\'s until release() (a result, the caller\'s; one a handler returns, the handler\'s): one never released keeps its memory', { code: 'GDRPC_POOL_UNRELEASED' });
      this.#overflowWarnAt *= 2;
    }
    return this.#storageAt(memory, 0, byteLength, () => {
      this.#overflowLive--;
      memory.close();
    });
  }

  #storageAt(memory: MappedMemory, offset: number, byteLength: number, giveBack: () => void): Storage<TensorPool> {
    const region = memory.region;
    let node: LiveNode<Storage<TensorPool>> | undefined;
    const storage: Storage<TensorPool> = new Storage<TensorPool>({
      device: this.device,
      byteLength,
      pool: this,
      host: memory.host?.subarray(offset, offset + byteLength),
      address: memory.address + BigInt(offset),
      span: region === undefined ? undefined : () => region.span(memory.regionOffset + offset, byteLength),
      free: () => {
        this.#live.remove(node!);
        giveBack();
      },
    });
    node = this.#live.add(storage);
    return storage;
  }

  stats(): TensorPoolStats {
    return {
      device: this.device,
      capacity: this.#arena.capacity,
      used: this.#arena.used,
      liveTensors: this.#live.size,
      overflowRegistrations: this.#overflowRegistrations,
      waiting: this.#waiters.size,
      waitingBytes: this.#queuedBytes,
      waited: this.#waited,
    };
  }

  /** Unmaps and frees the arena; FAILED_PRECONDITION while tensors are live unless `force` (they become released). */
  close(options: { force?: boolean } = {}): void {
    if (this.#closed) return;
    if (this.#live.size > 0 && options.force !== true) {
      throw new GdrpcError(Code.FAILED_PRECONDITION,
        `tensor pool on ${this.device} still has ${this.#live.size} live tensor(s); release them or close({ force: true })`);
    }
    // The arena first: if UCX refuses (a request still uses the region), nothing has changed yet.
    this.#memory.close();
    this.#closed = true;
    const closed = new GdrpcError(Code.FAILED_PRECONDITION, `tensor pool on ${this.device} was closed while waiting for blocks`);
    for (const waiter of this.#waiters.all()) waiter.fail(closed);
    for (const storage of this.#live.values()) storage.release();  // overflow tensors unmap their own memory
  }
}
