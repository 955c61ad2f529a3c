// What the dispatcher reads once it has fallen behind (dispatcher.ts #behindNow), a turn at a
// time, and the control receives that wait for the rest of their message meanwhile.
//
// UCX keeps every peer's control messages in one line, and reading them in that order let 8 peers
// that kept to their windows, sending messages slow to decode (maps of many keys), hold an honest
// client's ping behind all of their windows: 1.1 s at the median, for as long as they went on (a
// helper session's attack, 2026-12-06). Behind, each receive names one connection's tag (UCX finds
// a tag's messages through a hash, and keeps them in the order they came), in the order
// read-turns.ts gives: deficit round robin over the CPU time each message took to read, the line's
// turn ending each round. The line looks at the oldest control message first: one of a connection
// is read as that connection's, one of no connection is dropped unread, and when there is none,
// reading has caught up: the watch takes each message as it comes again. A receive that waits for
// the rest of its message (a rendezvous, a message in eager fragments) waits alone: it keeps its
// buffer, its connection's later messages wait for it, and the others go on (a peer that sent
// rendezvous messages and stopped its process held every connection's reading, a second a
// message, before: a helper session's attack, 2026-12-06). Past STALLED_RECEIVE_MS its connection
// is closed.
import type { Worker } from '../../ucx/index.ts';
import { CONTROL_BIT, CONTROL_MASK, EXACT_MASK } from '../../wire/tag.ts';
import { AwaitedReceives } from './awaited-receives.ts';
import { MIN_READ_CHARGE_MS, ReadTurns } from './read-turns.ts';
import type { ReceiveBuffer } from './receive-buffer.ts';
import type { ReceiveBuffers, Slot } from './receive-buffers.ts';
import type { ConnectionTable, Registered } from './connection-table.ts';
import type { Delivery } from './delivery.ts';

/** What one turn did: read a message (or dropped one of no connection), had none it could read,
 *  found that nothing can be read now, or found nothing queued (turns are over). */
export type TurnDone = 'read' | 'none' | 'blocked' | 'caught up';

/** Reading in turns for one dispatcher: whose turn it is, what each turn reads, and the receives
 *  that wait alone. */
export class Turns {
  /** Counts for DispatcherStats: receives given up on, times turns began, messages read in them. */
  readonly stats = { stalledReceives: 0, backlogs: 0, readInTurns: 0 };
  /** Reading is behind: connections take turns (take). */
  #on = false;
  /** Whose turn it is (read-turns.ts). */
  readonly #order = new ReadTurns<Registered>(() => this.table.values());
  /** Connections whose receive in a turn waits for its message (Registered.awaiting). */
  readonly #awaiting: AwaitedReceives;

  /** `readingClock`: what a message read in turns is charged by, in ms (read-turns.ts);
   *  `stopped`: the dispatcher's stop; `schedule`: the dispatcher reads on from an immediate (a
   *  receive waited for came, or a connection was closed, while turns were on). */
  constructor(
    private readonly worker: Worker,
    private readonly table: ConnectionTable,
    private readonly buffers: ReceiveBuffers,
    private readonly delivery: Delivery,
    private readonly readingClock: () => number,
    private readonly stopped: AbortSignal,
    private readonly schedule: () => void,
  ) {
    this.#awaiting = new AwaitedReceives(worker);
  }

  /** Whether reading is behind and connections take turns. */
  get on(): boolean { return this.#on; }

  /** Reading fell behind: from the next receive on, connections take turns, from a new round. */
  begin(): void {
    this.#on = true;
    this.stats.backlogs += 1;
    this.#order.reset();
  }

  /** The next turn: its connection's next message, or the line's oldest (turns end when none is
   *  queued: 'caught up'). */
  take(): TurnDone {
    const turn = this.#order.next();
    return turn === this.#order.line ? this.#lineTurn() : this.#connectionTurn(turn as Registered);
  }

  /** `registered` is gone: its turn, if on, ends, and a receive of it that waits for its message
   *  is no longer waited for. */
  forget(registered: Registered): void {
    this.#order.forget(registered);
    this.#awaiting.end(registered);
  }

  /** The dispatcher stopped: no turns, and no receive waited for (what they bring is dropped). */
  stop(): void {
    this.#on = false;
    this.#order.reset();
    this.#awaiting.clear();
  }

  /** A connection's turn: its next message, if one is queued and none of its own is on its way. */
  #connectionTurn(registered: Registered): 'read' | 'none' {
    if (registered.awaiting !== undefined || this.worker.tagProbe(registered.tag, EXACT_MASK) === null) {
      this.#order.end();
      return 'none';
    }
    this.#receiveOf(registered);
    return 'read';
  }

  /** The line's turn: the oldest control message, read as its connection's, or dropped when it is
   *  of none; 'blocked' when it cannot be read yet and nothing else was this round. */
  #lineTurn(): TurnDone {
    const oldest = this.worker.tagProbe(CONTROL_BIT, CONTROL_MASK);
    if (oldest === null) {
      // Caught up, unless a connection's message is still on its way: the watch could take that
      // connection's next one before it.
      if (this.#awaiting.size > 0) return this.#lineWaits();
      this.#caughtUp();
      return 'caught up';
    }
    const registered = this.table.entryOf(Number(oldest.senderTag & 0xffff_ffffn), Number(oldest.senderTag >> 32n));
    if (registered === undefined || registered.refused === true) {
      // Of no connection (gone, never was, or a guess), or of a refused handshake (leaveHello):
      // taken out without its bytes.
      const message = this.worker.tagProbe(oldest.senderTag, EXACT_MASK, { remove: true });
      if (message !== null) this.delivery.dropControl(message);
      this.#order.busy();
      this.#order.end();
      return 'read';
    }
    if (registered.awaiting !== undefined) return this.#lineWaits();
    this.#receiveOf(registered);
    return 'read';
  }

  /** The line can read nothing yet (a connection's earlier message is on its way): its turn ends,
   *  'blocked' when nothing else was read this round either. */
  #lineWaits(): 'none' | 'blocked' {
    const idle = this.#order.idle;
    this.#order.end();
    return idle ? 'blocked' : 'none';
  }

  /** Receives `registered`'s next message (one is queued) into the receive buffer; when it waits
   *  for the rest of its message, the buffer and slot stay with it and new ones go on. */
  #receiveOf(registered: Registered): void {
    const buffer = this.buffers.buffer(registered.hello === true);
    const slot = this.buffers.slot;
    const id = this.worker.requestId();
    let now: boolean;
    try {
      now = this.worker.tagRecvInto(buffer.bytes, registered.tag, EXACT_MASK, id, slot, (error?: unknown) => this.awaitedDone(registered, buffer, error));
    } catch (error) {
      // Failed at once (UCX refused it): the message is gone. Charged the floor, as a read one is:
      // a turn of such failures still ends.
      this.delivery.failed(buffer, error);
      this.#order.charge(this.#order.current, registered, MIN_READ_CHARGE_MS);
      return;
    }
    if (now) {
      this.#deliverInTurn(buffer, slot);
      return;
    }
    if (registered.hello === true) this.leaveHello(registered, buffer);
    else this.awaitAlone(registered, buffer, slot, id);
    this.#order.end();
  }

  /** A receive under `registered`'s HELLO key did not complete at once: no handshake waits for it,
   *  it is left to UCX (receive-buffers.ts). Past its bounds the handshake is refused at once (what
   *  else comes under its key is dropped unread: the second review of this change found a refusal
   *  left to the handshake's end let every message of the same slice be left too) and told
   *  (onStalled), and fails. No HELLO entry ever waits alone, which would keep the line's turn,
   *  and with it every other handshake's HELLO, behind it (the first review). */
  leaveHello(registered: Registered, buffer: ReceiveBuffer): void {
    if (this.buffers.leave(buffer, registered)) return;
    registered.refused = true;
    this.delivery.tell(() => registered.sink.onStalled());
  }

  /** `registered`'s receive `id` into `buffer` waits for the rest of its message: it keeps the
   *  buffer and slot, and new ones go on; its connection's later messages wait for it. */
  awaitAlone(registered: Registered, buffer: ReceiveBuffer, slot: Slot, id: number): void {
    this.#awaiting.add(registered, buffer, slot, id);
    this.buffers.keep(buffer);
  }

  /** A receive that waited for its message in a turn completed. */
  awaitedDone(registered: Registered, buffer: ReceiveBuffer, error: unknown): void {
    // Left to UCX (receive-buffers.ts): what came whole goes where its tag says now (a HELLO to
    // its handshake, if that still waits).
    const leftSlot = this.buffers.takeLeft(buffer);
    if (leftSlot !== undefined) {
      if (error === undefined && !this.stopped.aborted) this.delivery.deliver(buffer, leftSlot);
      return;
    }
    const awaited = registered.awaiting;
    // Given up on (its connection closed, or the dispatcher stopped): what came is dropped.
    if (awaited?.buffer !== buffer || this.stopped.aborted) return;
    this.#awaiting.end(registered);
    if (error === undefined) this.#deliverInTurn(buffer, awaited.slot);
    else this.delivery.failed(buffer, error);
    if (this.#on) this.schedule();
  }

  /** Gives up on receives that wait for the rest of their message while control messages wait in
   *  UCX's queue (awaited-receives.ts): their connections are closed. `queued`: a control message
   *  waits. A connection whose peer sent past its window meanwhile (its held line is over) is
   *  closed at once. */
  checkAwaited(queued: boolean): void {
    for (const [registered, bytes] of this.#awaiting.overrun()) {
      this.delivery.tell(() => registered.sink.onHeldOverrun?.(bytes));
      if (this.#on) this.schedule();
    }
    for (const registered of this.#awaiting.stalled(queued, performance.now())) {
      this.stats.stalledReceives += 1;
      this.delivery.tell(() => registered.sink.onStalled());
      if (this.#on) this.schedule();
    }
  }

  /** Delivers a message received in a turn, charging the time it took to its connection (to the
   *  line when it has none; read-turns.ts), MIN_READ_CHARGE_MS at least: a clock that stood still
   *  or went back (or read NaN) would have left the turn with its holder for as long as it had
   *  messages. */
  #deliverInTurn(buffer: ReceiveBuffer, slot: Slot): void {
    const turn = this.#order.current;
    const holder = this.table.registeredOf(slot[0]!, slot[1]!) ?? this.#order.line;
    // Read here, after the turn's probe and receive, not carried over from the delivery before (one
    // reading a message instead of two): a probe that finds its tag's message not yet queued runs
    // a progress pass, which moves every peer's bytes, and the connection whose message it brought
    // in was charged the pass (a review's 3 ms: a dozen rounds in debt; dispatcher-drain's test).
    const start = this.readingClock();
    this.delivery.deliver(buffer, slot);
    this.stats.readInTurns += 1;
    const took = this.readingClock() - start;
    this.#order.charge(turn, holder, took > MIN_READ_CHARGE_MS ? took : MIN_READ_CHARGE_MS);
  }

  #caughtUp(): void {
    this.#on = false;
    this.#order.reset();
  }
}
