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
}

/** What a room asks of its connection. */
export interface RoomLink {
  /** Whether what waits for the peer leaves room for more now. */
  free(): boolean;
  /** Whether the runtime is pressed (waiting.ts): the room asks to be told when it eases. */
  pressed(): boolean;
  /** Asks to be told (the room's changed()) once the runtime's waiting messages ease. */
  watchRuntime(room: Room): void;
}

interface Waiter { resolve(): void; reject(error: GdrpcError): void; off(): void; done: boolean }

export class Room {
  #waiters: Waiter[] = [];
  #head = 0;
  /** A turn is scheduled to let the next waiter go. */
  #scheduled = false;
  #closed: GdrpcError | undefined;

  constructor(private readonly link: RoomLink) {}

  /** Calls must wait (wait()) rather than go now: others wait before them, or there is no room. */
  get crowded(): boolean {
    return this.#head < this.#waiters.length || this.#closed !== undefined || !this.link.free();
  }

  /** Calls waiting for room now. */
  get waiting(): number {
    let waiting = 0;
    for (let i = this.#head; i < this.#waiters.length; i += 1) if (!this.#waiters[i]!.done) waiting += 1;
    return waiting;
  }

  /** Resolves when the call of `scope` may go, in the order the calls came; rejects with the
   *  scope's error (deadline, cancel) or the connection's (close()). */
  wait(scope: WaitScope): Promise<void> {
    if (this.#closed !== undefined) return Promise.reject(this.#closed);
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject, off: () => {}, done: false };
      waiter.off = scope.onAbort((error) => this.#settle(waiter, error));
      if (waiter.done) return;
      this.#waiters.push(waiter);
      if (this.link.pressed()) this.link.watchRuntime(this);
      this.changed();
    });
  }

  /** What waits for the peer shrank, or the runtime eased: the first waiter goes if there is room
   *  now, and the next one a turn later, once what the first made is counted. */
  changed(): void {
    if (this.#scheduled || this.#head === this.#waiters.length) return;
    this.#scheduled = true;
    setImmediate(this.#turn);
  }

  readonly #turn = (): void => {
    this.#scheduled = false;
    while (this.#head < this.#waiters.length && this.#waiters[this.#head]!.done) this.#shift();
    if (this.#head === this.#waiters.length) return;
    if (!this.link.free()) {
      // Told again when what waits for the peer shrinks; the runtime's easing is watched apart.
      if (this.link.pressed()) this.link.watchRuntime(this);
      return;
    }
    this.#settle(this.#shift()!);
    this.changed();
  };

  #shift(): Waiter | undefined {
    const waiter = this.#waiters[this.#head];
    this.#waiters[this.#head] = undefined!;
    this.#head += 1;
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
    if (error === undefined) waiter.resolve();
    else waiter.reject(error);
  }

  /** The connection closed: every waiting call fails with `error` (the connection marks it
   *  unprocessed: nothing of those calls was sent), as does every later wait. */
  close(error: GdrpcError): void {
    if (this.#closed !== undefined) return;
    this.#closed = error;
    const waiters = this.#waiters.slice(this.#head);
    this.#waiters = [];
    this.#head = 0;
    for (const waiter of waiters) this.#settle(waiter, this.#closed);
  }
}
