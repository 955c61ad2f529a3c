// Memory this side has exposed to a peer for RMA reads (rkeys sent), per connection. Each entry
// is released exactly once: on the peer's FIN, at the end of its call, or when the connection
// dies; a released exposure's id is never valid again.

interface Exposure { call: number; release: () => void }

/** The exposures of one connection. */
export class Exposures {
  readonly #live = new Map<number, Exposure>();
  #next = 1;

  /** Records an exposure for `call`; returns its id (the `x` of the descriptor). */
  add(call: number, release: () => void): number {
    const id = this.#next;
    this.#next = id >= 0xffff_ffff ? 1 : id + 1;
    this.#live.set(id, { call, release });
    return id;
  }

  /** Releases one exposure (FIN); unknown ids are ignored (already released). */
  release(id: number): void {
    const exposure = this.#live.get(id);
    if (exposure === undefined) return;
    this.#live.delete(id);
    exposure.release();
  }

  /** Releases every exposure of `call` (the call ended). */
  releaseCall(call: number): void {
    for (const [id, exposure] of this.#live) if (exposure.call === call) this.release(id);
  }

  /** Releases everything (the connection died or closed). */
  releaseAll(): void {
    for (const id of [...this.#live.keys()]) this.release(id);
  }

  get size(): number { return this.#live.size; }
}
