// Watches how long a connection's oldest message has waited for the peer's window while more than
// the cap waits (MAX_BLOCKED_BYTES, below), or calls wait to add to it (room.ts), and says when
// that passes the stall time (a connection's liveness time): the peer takes nothing, or far less
// than is made for it. One timer, set when the cap is passed or a call begins to wait, due when
// the message then oldest will have waited that long, and again for the next oldest while the
// backlog still holds.

/** What may wait for the peer's window to open (docs/wire.md "Message window"), in bytes of
 *  messages plus FRAME_HELD_BYTES a frame, while the peer does not take it: past this, once the
 *  oldest waiting message has waited the link's stallMs (a client that asks and never reads the
 *  answers, or reads a little now and then), the link is told (overflow). A peer that reads may
 *  have more waiting: 16 calls answered with 4 MB each, to a client reading as fast as its 8 MiB
 *  window let it, put 64 MB here, and closing at once failed them all (a helper session's
 *  review, 2026-12-07). Counting what the peer took instead (1 MiB within the time) let a peer
 *  that took 1 MB every 4 s keep 200 MiB waiting for as long as it went on (the next review); the
 *  oldest message's wait asks it to take everything made for it more than stallMs ago. The
 *  runtime's maxWaitingBytes bounds what all connections hold together (waiting.ts). */
export const MAX_BLOCKED_BYTES = 32 << 20;
/** What a waiting frame holds besides its message bytes, counted towards MAX_BLOCKED_BYTES: its
 *  outcome's callbacks and what waits on them. Measured: a server refusing small REQUESTs held
 *  about 3.9 KB of heap per ERROR frame waiting (a helper session's attack, 2026-12-06); counting
 *  the message bytes alone let 33 MB of waiting messages hold 965 MiB. */
export const FRAME_HELD_BYTES = 4096;

/** What the watch asks of the backlog it watches. */
export interface Backlog {
  /** The backlog holds: a message waits, and it is over its cap or calls wait behind it (it was
   *  closed: false). */
  holds(): boolean;
  /** When its oldest message began to wait (performance.now()). */
  oldestSince(): number;
  /** Its oldest message has waited `oldestMs`, at least the stall time, while it held. */
  stalled(oldestMs: number): void;
}

export class BacklogWatch {
  #timer: NodeJS.Timeout | undefined;

  constructor(private readonly backlog: Backlog) {}

  /** The backlog began to hold: watches it for `stallMs` (undefined: not watched), unless it
   *  already is. */
  start(stallMs: number | undefined): void {
    if (this.#timer !== undefined || stallMs === undefined) return;
    let due = 0;
    let extended = false;
    const arm = (delay: number): void => {
      due = performance.now() + delay;
      this.#timer = setTimeout(check, delay).unref();
    };
    const check = (): void => {
      this.#timer = undefined;
      if (!this.backlog.holds()) return;
      const now = performance.now();
      // Run out late by more than an eighth of the time (as liveness.ts judges a late tick):
      // this process's event loop was blocked, and the peer's credit may wait unread. The peer
      // gets that eighth once, for this side to read what came meanwhile.
      if (!extended && now - due > stallMs / 8) {
        extended = true;
        return arm(stallMs / 8);
      }
      const oldestMs = now - this.backlog.oldestSince();
      if (oldestMs >= stallMs) this.backlog.stalled(oldestMs);
      else arm(Math.max(1, stallMs - oldestMs));
    };
    arm(Math.max(1, stallMs - (performance.now() - this.backlog.oldestSince())));
  }

  /** Stops watching (the connection closed). */
  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
