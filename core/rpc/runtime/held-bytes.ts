// Bytes of tensor payloads that no frame announced, held by a runtime's connections for a frame
// still on its way (connection/held-payloads.ts). A connection holds 64 at most, for 10-20 s, but
// nothing weighed them: a peer whose own UCX sends everything eager had each payload read whole
// into this process, and one admitted connection sending 63 payloads of 64 MiB took a server to
// 4.1 GiB, two to 8.2 GiB (a helper session's attack, 2026-12-06). Held payloads are weighed by
// their length: the binding cannot tell an eager payload (whose bytes UCX holds) from a rendezvous
// one (whose bytes are still with the sender), so an honest connection's large tensors that
// arrived before their frame weigh as much, which is why the limit is large and what it sheds is
// the connection holding the most, not the one whose payload came last.

/** RuntimeOptions.maxHeldPayloadBytes by default. */
export const DEFAULT_MAX_HELD_PAYLOAD_BYTES = 1 << 30;

/** A connection holding unannounced payloads. */
export interface HeldBytesHolder {
  /** Holds `held` of the `total` held across the runtime, the most, over `limit`: it is to close
   *  now (its held payloads dropped). */
  shed(held: number, total: number, limit: number): void;
}

export class HeldBytes {
  readonly #held = new Map<HeldBytesHolder, number>();
  #total = 0;

  constructor(readonly limit: number) {}

  /** Bytes of unannounced payloads the runtime's connections hold now. */
  get total(): number { return this.#total; }

  /** `holder` holds `bytes` more (negative: fewer). Past the limit, the holders holding the most
   *  are shed, largest first, until the rest fits. */
  add(holder: HeldBytesHolder, bytes: number): void {
    const before = this.#held.get(holder);
    // A holder shed was taken off whole: what it lets go of as it closes is no longer counted.
    if (before === undefined && bytes < 0) return;
    const held = (before ?? 0) + bytes;
    this.#total += bytes;
    if (held > 0) this.#held.set(holder, held);
    else this.#held.delete(holder);
    while (this.#total > this.limit) {
      let largest: HeldBytesHolder | undefined;
      let most = 0;
      for (const [other, count] of this.#held) {
        if (count > most) {
          largest = other;
          most = count;
        }
      }
      if (largest === undefined) return;
      const total = this.#total;
      // Taken off first: its payloads are dropped as it closes, and it must not be shed twice.
      this.#held.delete(largest);
      this.#total -= most;
      largest.shed(most, total, this.limit);
    }
  }
}
