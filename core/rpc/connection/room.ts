// Backpressure: what a connection makes for its peer waits for room before it is made. A call
// whose REQUEST (client) or RESPONSE (server) would join messages already waiting for the peer's
// window waits here first, while its connection's backlog is over its cap (backlog-watch.ts
// MAX_BLOCKED_BYTES), or while the runtime holds half of maxWaitingBytes and the connection has
// any of it (waiting.ts pressed). Without this, a peer that read as fast as it could but was
// asked for more than the caps let wait lost its connection: 80 calls of 4.1 MB requests from one
// client closed that client's own connection by its runtime's maxWaitingBytes, and 2 clients x 40
// calls answered with 4.1 MB each had 74 of 160 fail on the server's (2026-12-07, CPU box).
// The calls that wait are still counted as calls in flight (maxCallsPerConnection, maxCalls) and
// still end with their deadline, a cancel or the connection; the peer must still take what waits
// within its liveness time (backlog-watch.ts), which ends a peer that reads nothing.
import type { GdrpcError } from '../../errors.ts';

/** What a waiting call is ended by (a call's CallScope): its deadline, a cancel. */
export interface WaitScope {
  /** Runs `fn` when the call ends (at once if it has); returns the unsubscriber. */
  onAbort(fn: (error: GdrpcError) => void): () => void;
  /** Throws the call's error if it has ended. */
  throwIfAborted(): void;
}

/** What a room asks of its connection. */
export interface RoomLink {
  /** Whether what waits for the peer leaves room for more now. */
  free(): boolean;
  /** Asks to be told (the room's changed()) once the runtime's waiting messages ease, if the
   *  runtime is pressed now (waiting.ts). */
  watchRuntime(room: Room): void;
  /** A call began to wait: the peer must now take its oldest waiting message within the
   *  connection's liveness time, whatever the backlog's size (backlog-watch.ts). Without that,
   *  peers each under the cap that took nothing held their calls waiting for ever while they
   *  kept the runtime pressed: 16 of them filled maxCalls, and the server refused every other
   *  caller (a helper session's review, 2026-12-07). */
  held(): void;
  /** What the calls waiting now hold (their weights, wait()) changed: the connection counts it
   *  with its waiting messages in the runtime's maxWaitingBytes (waiting.ts). */
  holding(): void;
}

/** Waiters that ended while in line (cancelled, out of time) kept before the line is compacted:
 *  a peer sending REQUEST and CANCEL pairs behind one waiting call grew a server by 21 MB/s
 *  until it ran out of heap, when only the head of the line was ever cleared (the same review). */
const MAX_ENDED_IN_LINE = 64;

interface Waiter { resolve(): void; reject(error: GdrpcError): void; off(): void; done: boolean; inLine: boolean; bytes: number }

export class Room {
  #waiters: Waiter[] = [];
  #head = 0;
  /** Waiters in #waiters from #head on that ended while in line. */
  #ended = 0;
  /** A turn is scheduled to let the next waiter go. */
  #scheduled = false;
  #closed: GdrpcError | undefined;
  /** The weights of the calls waiting in line. */
  #heldBytes = 0;

  constructor(private readonly link: RoomLink) {}

  /** What the calls waiting now hold, by the weights they came with (wait()). */
  get heldBytes(): number { return this.#heldBytes; }

  /** Calls waiting for room now. */
  get waiting(): number { return this.#waiters.length - this.#head - this.#ended; }
  /** Waiters kept in line, those that ended there included (for tests and diagnostics). */
  get kept(): number { return this.#waiters.length - this.#head; }

  /** Calls must wait (wait()) rather than go now: others wait before them, or there is no room. */
  get crowded(): boolean {
    return this.waiting > 0 || this.#closed !== undefined || !this.link.free();
  }

  /** Where a call about to make its REQUEST or RESPONSE goes through: undefined when it may go
   *  now (no promise on the way of a call that has room), else wait()'s promise, which also
   *  rejects if the call ended between its turn and its going on (nothing of it was sent, and
   *  nothing is to cancel). `weigh` says what the call holds while it waits (a server's answer,
   *  result-weight.ts): asked only when it must wait. */
  enter(scope: WaitScope, weigh?: () => number): Promise<void> | undefined {
    return this.crowded ? this.#waitThenCheck(scope, weigh?.() ?? 0) : undefined;
  }

  async #waitThenCheck(scope: WaitScope, bytes: number): Promise<void> {
    await this.wait(scope, bytes);
    scope.throwIfAborted();
  }

  /** Resolves when the call of `scope` may go, in the order the calls came; rejects with the
   *  scope's error (deadline, cancel) or the connection's (close()). While it waits, `bytes` (what
   *  it holds) count in heldBytes. */
  wait(scope: WaitScope, bytes = 0): Promise<void> {
    if (this.#closed !== undefined) return Promise.reject(this.#closed);
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject, off: () => {}, done: false, inLine: false, bytes: 0 };
      waiter.off = scope.onAbort((error) => this.#settle(waiter, error));
      if (waiter.done) return;
      waiter.inLine = true;
      this.#waiters.push(waiter);
      this.link.watchRuntime(this);
      this.link.held();
      if (bytes > 0) {
        waiter.bytes = bytes;
        this.#heldBytes += bytes;
        this.link.holding();
      }
      this.changed();
    });
  }

  /** What waits for the peer shrank, or the runtime eased: the first waiter goes if there is room
   *  now, and the next one a turn later, once what the first made is counted. */
  changed(): void {
    if (this.#scheduled || this.waiting === 0) return;
    this.#scheduled = true;
    setImmediate(this.#turn);
  }

  readonly #turn = (): void => {
    this.#scheduled = false;
    if (this.waiting === 0) return;
    const free = this.link.free();
    // free() may have ended what waited (the connection closed meanwhile).
    if (this.waiting === 0) return;
    if (!free) {
      // Told again when what waits for the peer shrinks; the runtime's easing is watched apart.
      this.link.watchRuntime(this);
      return;
    }
    let first = this.#shift();
    while (first.done) first = this.#shift();
    this.#settle(first);
    this.#dropEnded();
    this.changed();
  };

  /** Drops the ended waiters from the line: all of them once none is left waiting, else once
   *  they are more than MAX_ENDED_IN_LINE and half the line. */
  #dropEnded(): void {
    if (this.#ended === 0) return;
    if (this.waiting === 0) {
      this.#waiters = [];
    } else if (this.#ended > MAX_ENDED_IN_LINE && 2 * this.#ended > this.#waiters.length - this.#head) {
      this.#waiters = this.#waiters.slice(this.#head).filter((w) => !w.done);
    } else {
      return;
    }
    this.#head = 0;
    this.#ended = 0;
  }

  /** Takes the first waiter out of line (one is there). */
  #shift(): Waiter {
    const waiter = this.#waiters[this.#head]!;
    this.#waiters[this.#head] = undefined!;
    this.#head += 1;
    waiter.inLine = false;
    if (waiter.done) this.#ended -= 1;
    if (this.#head === this.#waiters.length) {
      this.#waiters = [];
      this.#head = 0;
    }
    return waiter;
  }

  #settle(waiter: Waiter, error?: GdrpcError): void {
    if (waiter.done) return;
    waiter.done = true;
    waiter.off();
    if (waiter.bytes > 0) {
      this.#heldBytes -= waiter.bytes;
      waiter.bytes = 0;
      this.link.holding();
    }
    if (error === undefined) {
      waiter.resolve();
      return;
    }
    waiter.reject(error);
    if (!waiter.inLine) return;
    this.#ended += 1;
    this.#dropEnded();
  }

  /** Fails waiting calls that hold something (weighed: a server's answer) with `error`, the
   *  latest first, until they let go of `bytes` (all of them if they hold less): the runtime
   *  holds too much for its peers (waiting.ts relieve). Dropping every waiting answer of a
   *  connection failed more of an honest client's calls than the limit asked for (a helper
   *  session's review, 2026-12-07). */
  dropHeld(error: GdrpcError, bytes = Number.POSITIVE_INFINITY): void {
    let dropped = 0;
    for (let i = this.#waiters.length - 1; i >= this.#head && dropped < bytes && this.#heldBytes > 0; i -= 1) {
      // Settling may compact the line (#dropEnded): past its new end there is nothing.
      const waiter = this.#waiters[i];
      if (waiter === undefined || waiter.done || waiter.bytes === 0) continue;
      dropped += waiter.bytes;
      this.#settle(waiter, error);
    }
  }

  /** The connection closed: every waiting call fails with `error` (the connection marks it
   *  unprocessed: nothing of those calls was sent), as does every later wait. */
  close(error: GdrpcError): void {
    if (this.#closed !== undefined) return;
    this.#closed = error;
    const waiters = this.#waiters.slice(this.#head);
    this.#waiters = [];
    this.#head = 0;
    this.#ended = 0;
    for (const waiter of waiters) {
      waiter.inLine = false;
      this.#settle(waiter, this.#closed);
    }
  }
}
