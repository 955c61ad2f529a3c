// The queue behind a streamed direction: the side that receives frames pushes items (promises,
// so that an item whose tensors are still arriving keeps its place), the consumer iterates.
import { GdrpcError } from '../../errors.ts';

/** An async iterable fed by pushes; ends on close(), fails on fail(). */
export class ItemQueue<T> implements AsyncIterable<T> {
  readonly #items: Array<Promise<T>> = [];
  #waiter: (() => void) | undefined;
  #ended = false;
  #error: GdrpcError | undefined;
  #onReturn: (() => void) | undefined;

  #onTake: (() => void) | undefined;

  /** `onReturn` runs when the consumer stops early (break / return / throw in for-await);
   *  `onTake` after each item the consumer has taken. */
  constructor(onReturn?: () => void, onTake?: () => void) {
    this.#onReturn = onReturn;
    this.#onTake = onTake;
  }

  push(item: Promise<T>): void {
    // Marked handled first: an item pushed after the stream ended (a peer's STREAM_ITEM behind a
    // frame that failed the call) is dropped, and its rejection must not reach the process.
    item.catch(() => { /* surfaced when consumed */ });
    if (this.#ended) return;
    this.#items.push(item);
    this.#wake();
  }

  /** No more items after those pushed. */
  close(): void {
    this.#ended = true;
    this.#wake();
  }

  /** Ends the stream with an error after the items already pushed. */
  fail(error: GdrpcError): void {
    if (this.#ended) return;
    this.#error = error;
    this.#ended = true;
    this.#wake();
  }

  /** Takes out the items not yet consumed (a consumer that stopped early leaves them). */
  takeRest(): Array<Promise<T>> {
    return this.#items.splice(0);
  }

  /** Number of items not yet consumed. */
  get backlog(): number { return this.#items.length; }
  /** No more items are taken: the stream ended, failed, or its consumer stopped. */
  get ended(): boolean { return this.#ended; }

  #wake(): void {
    const waiter = this.#waiter;
    this.#waiter = undefined;
    waiter?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    let finished = false;
    try {
      for (;;) {
        const next = this.#items.shift();
        if (next !== undefined) {
          const item = await next;
          this.#onTake?.();
          yield item;
          continue;
        }
        if (this.#ended) {
          finished = true;
          if (this.#error !== undefined) throw this.#error;
          return;
        }
        await new Promise<void>((resolve) => { this.#waiter = resolve; });
      }
    } finally {
      if (!finished) {
        this.#ended = true;
        this.#onReturn?.();
      }
    }
  }
}

/** The receiving end of a stream's flow control, the same on both sides: the peer may send
 *  `window` items, and each time the consumer has taken half a window that many more, told to the
 *  peer as CREDIT. An item past what was allowed is a peer ignoring the window, whose items would
 *  otherwise pile up without bound. */
export class ReceiveWindow {
  #allowed: number;
  #arrived = 0;
  #taken = 0;
  readonly #grantEvery: number;

  constructor(window: number) {
    this.#allowed = window;
    this.#grantEvery = Math.max(1, Math.floor(window / 2));
  }

  /** Counts an arriving item: undefined while within the window, else what was passed. */
  arrived(): string | undefined {
    this.#arrived += 1;
    return this.#arrived > this.#allowed ? `${this.#arrived} stream items where the window allowed ${this.#allowed} (win + CREDIT)` : undefined;
  }

  /** Counts an item the consumer took: the CREDIT to send back now, or 0. */
  took(): number {
    this.#taken += 1;
    if (this.#taken < this.#grantEvery) return 0;
    this.#taken = 0;
    this.#allowed += this.#grantEvery;
    return this.#grantEvery;
  }
}

/** What a stream's items received and not yet taken may weigh together, as plain.ts weighs what a
 *  frame body decodes to: 64 items (the window) of 5 MiB. The window counts items, and a frame of
 *  4 MiB may decode to about 24 times its bytes: before, a hostile server's items of tiny values
 *  took a client whose caller was slow to take them to V8's heap limit after 5 to 8 items (a
 *  helper session's attack, 2026-12-07); a client stream's items on a server are held the same
 *  way. One item alone is always taken (a frame is bounded by its own cap). */
export const MAX_UNTAKEN_WEIGHT = 320 << 20;

/** The weights of a stream's items received and not yet taken, in order. */
export class UntakenWeight {
  #weights: number[] = [];
  #head = 0;
  #total = 0;

  /** What the untaken items weigh now. */
  get total(): number { return this.#total; }

  /** Counts an arriving item of `weight`: undefined while the untaken items fit, else why not. */
  arrived(weight: number): string | undefined {
    if (this.#total > 0 && this.#total + weight > MAX_UNTAKEN_WEIGHT) {
      return `stream items that would hold ${this.#total + weight} bytes of heap untaken (at most ${MAX_UNTAKEN_WEIGHT})`;
    }
    this.#weights.push(weight);
    this.#total += weight;
    return undefined;
  }

  /** The consumer took the oldest item. */
  took(): void {
    if (this.#head >= this.#weights.length) return;
    this.#total -= this.#weights[this.#head]!;
    this.#head += 1;
    if (this.#head === this.#weights.length) {
      this.#weights = [];
      this.#head = 0;
    } else if (this.#head > 1024 && 2 * this.#head > this.#weights.length) {
      this.#weights = this.#weights.slice(this.#head);
      this.#head = 0;
    }
  }
}
