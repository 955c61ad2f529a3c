// What a server stream may send next: the client's item window (REQUEST `win`, then its CREDITs)
// and the tensor bytes it holds untaken (REQUEST `winb`, its maxResultBytes; CREDIT `b` gives
// them back as the caller takes items). Without a window a stream is limited by neither.
import type { CallScope } from '../call/deadline.ts';

export class StreamCredit {
  /** Items the client will still take. */
  #items = Number.MAX_SAFE_INTEGER;
  /** Tensor bytes of the items sent that the client has not credited back, and how many it holds. */
  #bytesOut = 0;
  #byteWindow = Infinity;
  #waiter: (() => void) | undefined;

  /** The REQUEST's window: `items` and `bytes` where it named them. */
  open(items: number | undefined, bytes: number | undefined): void {
    if (items !== undefined) this.#items = items;
    if (bytes !== undefined) this.#byteWindow = bytes;
  }

  /** CREDIT: `items` more may go, and the client took items of `bytes` tensor bytes (more than
   *  were sent counts as all of them). */
  grant(items: number, bytes: number): void {
    this.#items += items;
    this.#bytesOut = Math.max(0, this.#bytesOut - bytes);
    const waiter = this.#waiter;
    this.#waiter = undefined;
    waiter?.();
  }

  /** Resolves once the client will take another item: the handler is asked for one only then. */
  async wanted(scope: CallScope): Promise<void> {
    while (this.#items <= 0) await this.#granted(scope);
  }

  /** Resolves once an item of `bytes` tensor bytes may go, and counts it sent. It waits while the
   *  client holds as many bytes untaken as it said it would: a slow reader of large items slows
   *  the producer instead of failing. One item goes alone when nothing is out (past the window,
   *  the client refuses it). */
  async send(scope: CallScope, bytes: number): Promise<void> {
    while (this.#bytesOut > 0 && this.#bytesOut + bytes > this.#byteWindow) await this.#granted(scope);
    this.#items -= 1;
    this.#bytesOut += bytes;
  }

  #granted(scope: CallScope): Promise<void> {
    return scope.race(new Promise<void>((resolve) => { this.#waiter = resolve; }));
  }
}
