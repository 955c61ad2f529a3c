// Fixed slots of one long-lived buffer that small control frames are sent from. Handing UCX a
// fresh ArrayBuffer per send costs ~15 us in the binding (memory lookups for a new address range)
// against ~3 us for memory it has seen: frames are copied into a slot instead, which is held
// until the send completes.

const SLOT_BYTES = 16384;
const SLOTS = 256;

/** A pool of send slots; frames larger than a slot (or when all are busy) go out as they are. */
export class SendSlots {
  readonly #buffer = new ArrayBuffer(SLOT_BYTES * SLOTS);
  readonly #free: number[] = Array.from({ length: SLOTS }, (_, i) => SLOTS - 1 - i);

  /** Copies `bytes` into a free slot; returns the view to send and the function that frees it. */
  take(bytes: Uint8Array): { view: Uint8Array; release: () => void } | undefined {
    if (bytes.length > SLOT_BYTES) return undefined;
    const slot = this.#free.pop();
    if (slot === undefined) return undefined;
    const view = new Uint8Array(this.#buffer, slot * SLOT_BYTES, bytes.length);
    view.set(bytes);
    return { view, release: () => { this.#free.push(slot); } };
  }
}
