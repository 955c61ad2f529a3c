// Control receives, made in a turn, that wait for the rest of their message (a rendezvous, a
// message in eager fragments). Each keeps its own buffer and slot while the turns go on with other
// connections, and its connection's later messages wait for it. A peer that sent rendezvous
// messages and stopped its process held every connection's reading, a second a message, while
// one receive served all (a helper session's attack, 2026-12-06). One that has not come whole
// after its connection's stall time (FrameSink.receiveStallMs: its liveness time once admitted),
// and as many drain passes in a row, while other control messages wait, is given up on
// (stall-watch.ts), and its connection closed. The time was one second for every connection while
// a waiting receive kept its connection's later messages at the head of UCX's queue, in front of
// everyone else's; since the sweep holds them aside (below) the wait costs its own connection
// alone, and the second closed honest clients whose process was busy for a moment after it sent
// (its rendezvous messages wait for it to send their bytes): a client busy for 2.5 s after 8 calls
// lost 6 of them (test/rpc/busy-sender.test.ts); with two CPU hogs beside, 4 clients of 64 calls
// with 1 MB inline arguments lost a third of them (a helper session's review, 2026-12-07).
import { StallWatch } from './stall-watch.ts';
import type { ReceiveBuffer } from './receive-buffer.ts';
import type { Registered } from './connection-table.ts';
import type { Worker } from '../../ucx/index.ts';

/** How often the dispatcher's drain passes come (and look at these receives). */
export const DRAIN_INTERVAL_MS = 25;
/** A control receive whose message's rest has not come this long, while other control messages
 *  wait, is given up on and its connection closed, once as many drain passes in a row saw it so:
 *  for a connection that says no time of its own (FrameSink.receiveStallMs). */
export const STALLED_RECEIVE_MS = 1000;

/** The connections whose receive in a turn waits for its message (Registered.awaiting). */
export class AwaitedReceives {
  readonly #waiting = new Set<Registered>();

  /** `worker`: the binding's sweep holds the later messages of a connection that waits (sweepHold). */
  constructor(private readonly worker: Pick<Worker, 'closed' | 'sweepHold' | 'sweepHeld'>) {}

  get size(): number { return this.#waiting.size; }

  /** `registered`'s receive `id` into `buffer` (its sender tag and length to come in `slot`)
   *  waits for the rest of its message. */
  add(registered: Registered, buffer: ReceiveBuffer, slot: Uint32Array, id: number): void {
    const stallMs = registered.sink.receiveStallMs?.() ?? STALLED_RECEIVE_MS;
    registered.awaiting = { buffer, slot, id, watch: new StallWatch(Math.ceil(stallMs / DRAIN_INTERVAL_MS), stallMs) };
    this.#waiting.add(registered);
    // While it waits, the binding's sweep takes the connection's later messages out of UCX's
    // queue into a line of their own (read first, in order), up to what its window lets its peer
    // send, so that it can look past them: left at the head of UCX's queue, they held every
    // message behind them, a flood under made-up keys included, until the connection was closed
    // as stalled (2 GiB in 1.3 s from a peer with no token: docs/security.md, Open gaps).
    const cap = registered.sink.holdCap?.();
    if (cap !== undefined && !this.worker.closed) this.worker.sweepHold(registered.tag, cap.bytes, cap.perMessage);
  }

  /** The waiting connections whose peer sent past its window meanwhile (their held line would
   *  pass its cap), with the bytes held: they stop waiting, and are to be closed. */
  overrun(): Array<[Registered, number]> {
    const overrun: Array<[Registered, number]> = [];
    if (this.worker.closed) return overrun;
    for (const registered of this.#waiting) {
      const held = this.worker.sweepHeld(registered.tag);
      if (held.over) overrun.push([registered, held.bytes]);
    }
    for (const [registered] of overrun) this.end(registered);
    return overrun;
  }

  /** `registered` waits for no receive any more (what its receive brings later is dropped). */
  end(registered: Registered): void {
    registered.awaiting = undefined;
    if (this.#waiting.delete(registered) && !this.worker.closed) this.worker.sweepHold(registered.tag, 0);
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
    for (const registered of [...this.#waiting]) this.end(registered);
  }
}
