// Bytes of tensor payloads that no frame announced, held by a runtime's connections for a frame
// still on its way (connection/held-payloads.ts). A connection holds 64 at most, for 10-20 s, but
// nothing weighed them: a peer whose own UCX sends everything eager had each payload read whole
// into this process, and one admitted connection sending 63 payloads of 64 MiB took a server to
// 4.1 GiB, two to 8.2 GiB (a helper session's attack, 2026-12-06). Held payloads are weighed by
// their length: the binding cannot tell an eager payload (whose bytes UCX holds) from a rendezvous
// one (whose bytes are still with the sender), so an honest connection's large tensors that
// arrived before their frame weigh as much. Under load they do: a server behind on its control
// messages by a second takes the payloads of the frames still queued out of UCX's queue (the
// drain waits 200 ms for the loop), and 200 honest connections with 10% of their calls carrying
// 1-16 MiB held several GiB so. Closing the connection holding the most, as this did at first,
// lost thousands of honest connections in such a run (bench/load.ts, mixed). So past the limit
// payloads are dropped, not connections: the newest of the connection holding the most, until the
// rest fits; each one's call fails RESOURCE_EXHAUSTED (retryable) once its frame is read, as a
// call does that finds the pool busy, and an eager sender's bytes are freed all the same.

/** RuntimeOptions.maxHeldPayloadBytes by default. */
export const DEFAULT_MAX_HELD_PAYLOAD_BYTES = 1 << 30;

/** A connection holding unannounced payloads. */
export interface HeldBytesHolder {
  /** The runtime's connections hold more than the limit, and this one the most: it drops its
   *  newest held payloads until it let go of `bytes` or holds none; returns what it let go of
   *  (not told back through add()). */
  relieve(bytes: number): number;
}

export class HeldBytes {
  readonly #held = new Map<HeldBytesHolder, number>();
  #total = 0;

  constructor(readonly limit: number) {}

  /** Bytes of unannounced payloads the runtime's connections hold now. */
  get total(): number { return this.#total; }

  /** `holder` holds `bytes` more (negative: fewer). Past the limit, the holders holding the most
   *  drop payloads, largest holder first, until the rest fits. */
  add(holder: HeldBytesHolder, bytes: number): void {
    this.#set(holder, (this.#held.get(holder) ?? 0) + bytes);
    this.#total += bytes;
    // Holders that let go of nothing this time are passed over for the next largest: one whose
    // weight it cannot drop must not stop the others' (a helper session held the limit off every
    // connection so, before payloads announced smaller than held were refused).
    const passed = new Set<HeldBytesHolder>();
    while (this.#total > this.limit) {
      let largest: HeldBytesHolder | undefined;
      let most = 0;
      for (const [other, count] of this.#held) {
        if (count > most && !passed.has(other)) {
          largest = other;
          most = count;
        }
      }
      if (largest === undefined) return;
      const freed = Math.min(most, largest.relieve(this.#total - this.limit));
      if (freed <= 0) {
        passed.add(largest);
        continue;
      }
      this.#set(largest, most - freed);
      this.#total -= freed;
    }
  }

  #set(holder: HeldBytesHolder, held: number): void {
    if (held > 0) this.#held.set(holder, held);
    else this.#held.delete(holder);
  }
}
