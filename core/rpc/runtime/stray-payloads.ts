// Tensor payloads that no receive was posted for wait in UCX's unexpected queue. A drain pass,
// every DRAIN_INTERVAL_MS, takes them out and hands each to its connection (which holds a few,
// briefly, for a frame still on its way) and drops the rest, so nothing a peer sends is queued
// for ever; at close, whatever is left is dropped.
import type { TakenMessage, Worker } from '../../ucx/index.ts';
import { CONTROL_MASK, dataParts, EXACT_MASK } from '../../wire/tag.ts';
import type { ConnectionTable, Registered } from './connection-table.ts';

/** Most payloads taken in one drain pass, so that a flood cannot hold the event loop. */
const DRAIN_BATCH = 4096;
/** Longest a runtime's close spends dropping what peers left in the queue (dropAll). */
const CLOSE_DRAIN_MS = 1000;
/** Drain passes in a row that may wait for the control loop (see take). */
const MAX_DRAIN_DEFERRALS = 8;

export class StrayPayloads {
  /** Drain passes in a row put off because a control message was waiting. */
  #deferrals = 0;

  /** `drop` receives a message into nothing (and counts it). */
  constructor(private readonly worker: Worker, private readonly table: ConnectionTable, private readonly drop: (message: TakenMessage) => void) {}

  /** One drain pass (`controlQueued`: a control message waits to be read). A peer sends a frame
   *  before the payloads it announces, and UCX keeps one peer's messages in order: while a
   *  control message still waits to be read, the payloads behind it may be its own, announced
   *  as soon as the loop reads it. Taking them now would count them as strays (a batch of many
   *  tensors overran the limit so). So the pass waits for the loop, a few passes at most, so
   *  that a peer flooding control messages cannot keep its strays in UCX's queue for ever. (A
   *  control receive that has completed but is not yet settled in JS is the binding's to see:
   *  tagProbe with `remove` takes nothing then.) */
  take(controlQueued: boolean): void {
    if (this.#deferrals < MAX_DRAIN_DEFERRALS && controlQueued) {
      this.#deferrals += 1;
      // Those at the head of UCX's queue, with no control message before them there, are taken
      // now: the binding's sweep stops at the oldest message when it is someone's, and one payload
      // of an attacker's own ahead of a flood under made-up keys held 1 GiB of it for the eight
      // passes (a helper session's review: RSS +319 MiB, +3 MiB without the payload).
      this.#takeHead();
      return;
    }
    this.#deferrals = 0;
    for (let taken = 0; taken < DRAIN_BATCH; taken += 1) {
      // Bit 63 clear: every non-control message, whatever its class byte.
      const message = this.worker.tagProbe(0n, CONTROL_MASK, { remove: true });
      if (message === null) return;
      this.#route(message);
    }
  }

  /** Takes the payloads at the head of UCX's queue, up to its oldest control message or one of a
   *  connection with frames of its own still to be read (a receive waiting for the rest of its
   *  message, or messages held aside behind it: a frame announcing a batch of many tensors may
   *  be among them, and its payloads wait for it as before). */
  #takeHead(): void {
    for (let taken = 0; taken < DRAIN_BATCH; taken += 1) {
      // The oldest message of any tag in UCX's queue (UCX answers it from the head of its list);
      // not the messages held aside, which have left that queue (with them first, any held line
      // stopped this at once: a helper session's review).
      const oldest = this.worker.tagProbe(0n, 0n, { queueOnly: true });
      if (oldest === null || (oldest.senderTag & CONTROL_MASK) !== 0n) return;
      const parts = dataParts(oldest.senderTag);
      const registered = parts === undefined ? undefined : this.table.byPrefix(parts.prefix);
      if (registered !== undefined && this.#framesWaiting(registered)) return;
      const message = this.worker.tagProbe(oldest.senderTag, EXACT_MASK, { remove: true, queueOnly: true });
      if (message === null) return;
      this.#route(message);
    }
  }

  /** A payload taken: to its connection, or dropped when it has none. */
  #route(message: TakenMessage): void {
    const parts = dataParts(message.senderTag);
    const registered = parts === undefined ? undefined : this.table.byPrefix(parts.prefix);
    if (registered === undefined) this.drop(message);
    else registered.sink.onStrayData(message, parts!.low, this.#framesWaiting(registered));
  }

  /** At close, once every endpoint is closed (nothing new arrives): takes every message left in
   *  UCX's unexpected queue (payloads, and control messages the loop had not read yet) and drops
   *  it, for at most CLOSE_DRAIN_MS. Left there, each would be reported by the worker's destroy
   *  on stdout ("unexpected tag-receive descriptor ... was not matched"). It stops early when a
   *  completion is waiting to be handed to JavaScript (tagProbe takes nothing then), which after
   *  the endpoints closed needs a message and a completion in one progress pass. Returns how many
   *  it dropped. */
  dropAll(): number {
    if (this.worker.closed) return 0;
    const until = performance.now() + CLOSE_DRAIN_MS;
    let dropped = 0;
    for (;;) {
      const message = this.worker.tagProbe(0n, 0n, { remove: true });
      if (message === null) break;
      this.drop(message);
      dropped += 1;
      if ((dropped & 1023) === 0 && performance.now() > until) break;
    }
    return dropped;
  }

  /** Whether control messages of `registered`'s own wait to be read (in UCX's queue, or one
   *  received in a turn waiting for the rest of it): the frames of its stray payloads may be
   *  among them. */
  #framesWaiting(registered: Registered): boolean {
    return registered.awaiting !== undefined || this.worker.tagProbe(registered.tag, EXACT_MASK) !== null;
  }
}
