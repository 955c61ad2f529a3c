// What a runtime lends of message window beyond its connections' opening windows (docs/wire.md
// "Message window"). Every connection opens with a small window (window.ts OPENING_WINDOW_BYTES),
// which is all a peer may have in UCX's queue at once; a message larger than that takes a loan,
// asked for with WANT, and the loans out at once are bounded across the runtime. Until 2026-12-06
// each connection opened with its whole window (8 MiB), and nothing bounded their sum but the
// connection limits: 60 connections filling theirs put 420 MiB in UCX's queue (docs/security.md
// "Per-connection bounds add up across connections").

/** RuntimeOptions.maxLentWindowBytes by default: sixteen of the largest messages a default
 *  receive buffer takes. */
export const DEFAULT_MAX_LENT_WINDOW_BYTES = 64 << 20;
/** RuntimeOptions.maxWindowBytes by default: 32 connections at a default whole window (8 MiB). */
export const DEFAULT_MAX_WINDOW_BYTES = 256 << 20;

/** What connections open with beyond their smallest opening window (window.ts
 *  OPENING_WINDOW_BYTES), across a runtime: each takes as much as is free, up to its whole
 *  window, for its life. A window that small costs a credit and its ACK (two messages, and often
 *  two wake-ups) every 64 KiB read: 64 small calls in flight on the 2-core CPU box made 5-8 %
 *  fewer calls a second than with 8 MiB; a few connections keep the whole window, many share
 *  this budget. */
export class OpeningWindows {
  #free: number;

  constructor(readonly capacity: number) {
    this.#free = capacity;
  }

  /** Bytes taken now. */
  get taken(): number { return this.capacity - this.#free; }

  /** Up to `bytes` more for a new connection's opening window: what it gets. */
  take(bytes: number): number {
    const taken = Math.max(0, Math.min(bytes, this.#free));
    this.#free -= taken;
    return taken;
  }

  /** A connection closed: what it took comes back. */
  give(bytes: number): void {
    this.#free += bytes;
  }
}

/** A connection's window asking for a loan. */
export interface Borrower {
  /** `bytes` are lent to it now (taken from the budget until it gives them back). */
  lent(bytes: number): void;
}

/** The runtime's budget of lent window: asks are served in the order they came, each when the
 *  bytes it asks for are free (one larger than the whole budget when nothing is lent). */
export class WindowLoans {
  #free: number;
  /** Borrowers waiting, in the order they asked, with what each asked for. */
  readonly #waiting = new Map<Borrower, number>();

  constructor(readonly capacity: number) {
    this.#free = capacity;
  }

  /** Bytes lent now. */
  get lent(): number { return this.capacity - this.#free; }
  /** Borrowers waiting for a loan. */
  get waiting(): number { return this.#waiting.size; }

  /** `who` asks for `bytes`: lent now (its lent() called before this returns) when nobody waits
   *  ahead of it and they are free, else when they are. A borrower asks once at a time. */
  ask(who: Borrower, bytes: number): void {
    if (this.#waiting.size === 0 && this.#fits(bytes)) {
      this.#free -= bytes;
      who.lent(bytes);
      return;
    }
    this.#waiting.set(who, bytes);
  }

  /** `bytes` of a loan came back (used and paid back by reading, declined, or its connection
   *  closed): the asks waiting are served, in order, while they fit. */
  give(bytes: number): void {
    if (bytes <= 0) return;
    this.#free += bytes;
    this.#serve();
  }

  /** `who` no longer waits (its connection closed); the asks behind it may fit now. */
  withdraw(who: Borrower): void {
    if (this.#waiting.delete(who)) this.#serve();
  }

  #serve(): void {
    for (const [who, asked] of this.#waiting) {
      if (!this.#fits(asked)) break;
      this.#waiting.delete(who);
      this.#free -= asked;
      who.lent(asked);
    }
  }

  #fits(bytes: number): boolean {
    return bytes <= this.#free || this.#free === this.capacity;
  }
}
