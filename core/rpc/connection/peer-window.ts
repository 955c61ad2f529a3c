// The peer's message window as this side counts what it sends (docs/wire.md "Message window"):
// what the window takes now, what a loan adds for one message, and what every message sent
// weighed. The peer counts the same from its side (window.ts ReceiveWindow), so the two agree
// message by message; the outbox asks this count before each message leaves.

/** This side's count of the peer's window. Unlimited until the peer announced one. */
export class PeerWindow {
  /** Weight of messages the window still takes. */
  #credit = Number.POSITIVE_INFINITY;
  /** The window as the peer announced it (`win`, READY's once widened): a message over half of it
   *  may need a loan. */
  #size = Number.POSITIVE_INFINITY;
  /** A loan the peer made for the next message (0: none): spent by it, whatever it leaves. */
  #loan = 0;
  /** Weight of every message sent on the connection (the peer counts the same). */
  #sent = 0;
  /** What loans paid for of the messages sent: the peer does not credit that back. */
  #spent = 0;

  /** The peer announced its window (HELLO's or AUTH's `win`): what was sent before counts. */
  open(bytes: number): void {
    this.#credit = bytes - this.#sent;
    this.#size = bytes;
  }

  /** The peer's window grew to `bytes` (READY's `win`): the difference is room now. False when
   *  it did not grow. */
  widen(bytes: number): boolean {
    if (bytes <= this.#size) return false;
    this.#credit += bytes - this.#size;
    this.#size = bytes;
    return true;
  }

  /** The peer took `bytes` more (CREDIT on call 0). */
  grant(bytes: number): void {
    this.#credit = Math.min(this.#credit + bytes, Number.MAX_SAFE_INTEGER);
  }

  /** The peer lent `bytes` for the next message (0: the loan is over, used or not). */
  lend(bytes: number): void { this.#loan = bytes; }

  /** Whether a message of `weight` may go now (a loan included). */
  takes(weight: number): boolean { return weight <= this.#credit + this.#loan; }

  /** What a message of `weight` needs beyond the window's room, when it is larger than half the
   *  window (so credit alone may never let it go: the peer may keep up to a quarter uncredited);
   *  0 when it fits or is smaller. */
  shortfall(weight: number): number {
    if (weight * 2 <= this.#size || weight <= this.#credit) return 0;
    return weight - this.#credit;
  }

  /** A message of `weight` was sent: it takes that much of the window, and of a loan first what
   *  the window lacked (the rest of the loan is gone). */
  sent(weight: number): void {
    if (this.#loan > 0) {
      const spent = Math.min(this.#loan, Math.max(0, weight - this.#credit));
      this.#credit += spent;
      this.#spent += spent;
      this.#loan = 0;
    }
    this.#credit -= weight;
    this.#sent += weight;
  }

  /** What every message sent so far weighs. */
  get sentBytes(): number { return this.#sent; }
  /** What the peer may credit back of it: sentBytes less what loans paid for. */
  get creditable(): number { return this.#sent - this.#spent; }
}
