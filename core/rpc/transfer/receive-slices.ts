// How a frame's receives are started: in slices, a turn of the event loop each (transfer.ts).

/** How many of a frame's tensors are allocated and posted in one turn of the event loop. */
export const RECEIVE_SLICE = 256;

/** A frame's receives, started in slices. A frame may announce MAX_TENSORS_PER_FRAME tensors,
 *  each allocated (or queued for pool memory) and posted on receipt: in slices of RECEIVE_SLICE
 *  tensors (a gather counts its members), each slice in its own turn of the event loop, so that
 *  one frame of many tensors does not hold up every other connection while it is taken apart. */
export class ReceiveSlices {
  readonly #slices: Array<Promise<unknown>> = [];
  #slice: Array<Promise<void>> = [];
  #inSlice = 0;

  /** Before starting `tensors` more: whether the slice is full, its turn then over. */
  full(tensors: number): boolean {
    return this.#inSlice > 0 && this.#inSlice + tensors > RECEIVE_SLICE;
  }

  /** A receive started in the current slice, of `tensors` tensors. */
  add(receiving: Promise<void>, tensors: number): void {
    this.#inSlice += tensors;
    this.#slice.push(receiving);
  }

  /** Ends the current slice (the caller then waits a turn). */
  end(): void {
    if (this.#slice.length === 0) return;
    const all = Promise.all(this.#slice);
    // Waited for together by all(); handled now, since the turns between slices come first.
    all.catch(() => {});
    this.#slices.push(all);
    this.#slice = [];
    this.#inSlice = 0;
  }

  /** Settles once every receive started has; one slice, a call's common case, is waited for as
   *  it is. */
  all(): Promise<unknown> {
    this.end();
    return this.#slices.length === 1 ? this.#slices[0]! : Promise.all(this.#slices);
  }
}
