// Control receives, made in a turn, that wait for the rest of their message (a rendezvous, a
// message in eager fragments). Each keeps its own buffer and slot while the turns go on with other
// connections, and its connection's later messages wait for it. A peer that sent rendezvous
// messages and stopped its process held every connection's reading, a second a message, while
// one receive served all (a helper session's attack, 2026-12-06). One that has not come whole
// after STALLED_RECEIVE_MS, and as many drain passes in a row, while other control messages wait,
// is given up on (stall-watch.ts), and its connection closed.
import { StallWatch } from './stall-watch.ts';
import type { ReceiveBuffer } from './receive-buffer.ts';
import type { Registered } from './connection-table.ts';

/** How often the dispatcher's drain passes come (and look at these receives). */
export const DRAIN_INTERVAL_MS = 25;
/** A control receive whose message's rest has not come this long, while other control messages
 *  wait, is given up on and its connection closed, once as many drain passes in a row saw it so. */
export const STALLED_RECEIVE_MS = 1000;

/** The connections whose receive in a turn waits for its message (Registered.awaiting). */
export class AwaitedReceives {
  readonly #waiting = new Set<Registered>();

  get size(): number { return this.#waiting.size; }

  /** `registered`'s receive `id` into `buffer` (its sender tag and length to come in `slot`)
   *  waits for the rest of its message. */
  add(registered: Registered, buffer: ReceiveBuffer, slot: Uint32Array<ArrayBuffer>, id: number): void {
    registered.awaiting = { buffer, slot, id, watch: new StallWatch(Math.ceil(STALLED_RECEIVE_MS / DRAIN_INTERVAL_MS), STALLED_RECEIVE_MS) };
    this.#waiting.add(registered);
  }

  /** `registered` waits for no receive any more (what its receive brings later is dropped). */
  end(registered: Registered): void {
    registered.awaiting = undefined;
    this.#waiting.delete(registered);
  }

  /** One drain pass at `now` (`queued`: a control message waits in UCX's queue): the receives
   *  stalled that long are given up on, and their connections returned. */
  stalled(queued: boolean, now: number): Registered[] {
    const stalled: Registered[] = [];
    for (const registered of this.#waiting) {
      const awaited = registered.awaiting!;
      if (awaited.watch.stalled(awaited.id, queued, now)) stalled.push(registered);
    }
    for (const registered of stalled) this.end(registered);
    return stalled;
  }

  /** Forgets every receive (the dispatcher stopped): what they bring is dropped. */
  clear(): void {
    for (const registered of this.#waiting) registered.awaiting = undefined;
    this.#waiting.clear();
  }
}
