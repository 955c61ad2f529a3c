// What all of a runtime's connections hold waiting for their peers' message windows (docs/wire.md
// "Message window"). Each connection's outbox is capped (outbox.ts MAX_BLOCKED_BYTES, 32 MiB
// counted), but a peer may open many connections: 60 of them from one address, each keeping to
// the server's window while never crediting it, held 715 MiB of a server's heap before each
// reached its own cap (scratch attack, CPU box), and a server takes 1,024 connections. Past the
// runtime's limit the connection holding the most is closed, then the next, until what is left
// fits: the one that holds the most is the likeliest to take nothing, and closing it frees the most.

/** RuntimeOptions.maxWaitingBytes by default: eight connections at their own cap. */
export const DEFAULT_MAX_WAITING_BYTES = 256 << 20;

/** A holder of waiting messages (a connection), closed by the ledger when it holds the most past
 *  the limit. */
export interface WaitingHolder {
  /** Holds `held` of the `total` counted across the runtime, over `limit`: it is to close now
   *  (and then tell the ledger it holds nothing). */
  shed(held: number, total: number, limit: number): void;
}

export class WaitingLedger {
  readonly #held = new Map<WaitingHolder, number>();
  #total = 0;
  #shedding = false;

  constructor(readonly limit: number) {}

  /** What the runtime's connections hold waiting, counted as outbox.ts counts it. */
  get total(): number { return this.#total; }

  /** `holder` now holds `bytes` waiting (0: nothing). Past the limit, the holders that hold the
   *  most are shed in a microtask of their own: not inside the outbox's flush that reported it. */
  set(holder: WaitingHolder, bytes: number): void {
    this.#total += bytes - (this.#held.get(holder) ?? 0);
    if (bytes > 0) this.#held.set(holder, bytes);
    else this.#held.delete(holder);
    if (this.#total > this.limit && !this.#shedding) {
      this.#shedding = true;
      queueMicrotask(this.#shed);
    }
  }

  readonly #shed = (): void => {
    this.#shedding = false;
    while (this.#total > this.limit) {
      let largest: WaitingHolder | undefined;
      let most = 0;
      for (const [holder, bytes] of this.#held) {
        if (bytes > most) {
          largest = holder;
          most = bytes;
        }
      }
      if (largest === undefined) return;
      const total = this.#total;
      // Taken off first: a holder that failed to tell the ledger it let go must not be shed twice.
      this.#held.delete(largest);
      this.#total -= most;
      largest.shed(most, total, this.limit);
    }
  };
}
