// Routes what arrives on the process's one worker to its connections. UCX tag matching does not
// say which endpoint sent a message, so the tag's connection key is what ties a message to its
// connection (wire/tag.ts): the key is random and only that connection's peer learns it, so no
// other peer can put a message into the connection. Control messages are read one at a time,
// oldest first, which keeps each connection's frames in the order they were sent; each is taken
// out of UCX's queue before any of it is received (tagWatch), so that its sender is known first.
// While they come faster than they are read, connections take turns (#takeTurns), so that no
// peer's messages, however slow to decode, hold everyone else's behind them. Tensor payloads
// that no receive was posted for are collected by a periodic drain (stray-payloads.ts).
import { threadCpuClock, type TakenMessage, type Worker } from '../../ucx/index.ts';
import { Code, GdrpcError } from '../../errors.ts';
import { CONTROL_BIT, CONTROL_MASK, EXACT_MASK, type ConnectionKey } from '../../wire/tag.ts';
import { AwaitedReceives, DRAIN_INTERVAL_MS, STALLED_RECEIVE_MS } from './awaited-receives.ts';
import { StrayPayloads } from './stray-payloads.ts';
import { ReadTurns } from './read-turns.ts';
import type { ReceiveBuffer } from './receive-buffer.ts';
import { ReceiveBuffers, type Slot } from './receive-buffers.ts';
import { ConnectionTable, type FrameSink, type Registered } from './connection-table.ts';
import { Delivery } from './delivery.ts';

export type { FrameSink } from './connection-table.ts';
export { DRAIN_INTERVAL_MS, STALLED_RECEIVE_MS };
export { MAX_HELLO_BYTES, MAX_LEFT_HELLO_RECEIVES, MAX_LEFT_PER_HELLO } from './receive-buffers.ts';

/** Control messages read before the loop yields to timers and I/O (whichever comes first). */
export const RECEIVE_SLICE_MESSAGES = 256;
const RECEIVE_SLICE_MS = 4;

/** How soon turns look again when every message queued is one they cannot read yet (its
 *  connection's earlier message still on its way): no watch is armed then to say that another
 *  came. */
const BLOCKED_RECHECK_MS = 2;

/** Counters of what the dispatcher dropped (for tests and diagnostics). */
export interface DispatcherStats {
  /** Control messages and payloads of no live connection, dropped (by the binding's sweep or
   *  here); of them, those the sweep dropped (Worker.sweep). */
  unattributed: number; droppedPayloads: number; sweptControl: number; sweptData: number; connections: number;
  /** Control receives given up on: their message's rest never came, the connection was closed
   *  (#checkAwaited). */
  stalledReceives: number;
  /** Times the reading fell behind and connections took turns; messages read in turns. */
  backlogs: number; readInTurns: number;
  /** Messages under a HELLO key that were not whole when received, left to UCX unread; those of
   *  them UCX has not completed yet (each keeps a MAX_HELLO_BYTES buffer). */
  leftHellos: number; leftHellosOpen: number;
}

/** Routes control messages and stray payloads of one worker to its connections. */
export class Dispatcher {
  readonly #table: ConnectionTable;
  /** Where receives land (a buffer and a slot, where the binding writes a received message's
   *  sender tag and length: tagRecvInto). */
  readonly #buffers: ReceiveBuffers;
  #stop = new AbortController();
  #running = false;
  /** Where the watch writes a taken message's sender tag, length and taken id (tagWatch). */
  readonly #takeSlot = new Uint32Array(5);
  /** The watch is armed (or its take is about to be told): #onTaken comes. */
  #watching = false;
  #sliceStart = 0;
  #inSlice = 0;
  #drainTimer: NodeJS.Timeout | undefined;
  readonly #stats = { stalledReceives: 0, backlogs: 0, readInTurns: 0 };
  readonly #delivery: Delivery;
  /** Reading is behind: connections take turns (#takeTurns). */
  #inTurns = false;
  readonly #turns = new ReadTurns<Registered>(() => this.#table.values());
  /** Connections whose receive in a turn waits for its message (Registered.awaiting). */
  readonly #awaiting: AwaitedReceives;
  readonly #strays: StrayPayloads;
  /** A #resume is scheduled (setImmediate), or a look again when turns were blocked. */
  #scheduled = false;
  #recheck: NodeJS.Timeout | undefined;
  /** The last drain pass found a control message waiting in UCX's queue (behind). */
  #behind = false;

  /** Whether the watch after a message it waited for waits for the event loop's turn (#onTaken). */
  readonly #receiveAfterTurn: boolean;

  /** `readingClock`: what a message read in turns is charged by, in ms (read-turns.ts): the
   *  thread's CPU time unless told. */
  constructor(private readonly worker: Worker, frameBytes: number, private readonly readingClock: () => number = threadCpuClock()) {
    // What comes under a tag of no entry is dropped inside the binding, after the progress pass
    // that brought it (docs/binding.md "The sweep"): a flood under made-up keys, read here, had UCX
    // hold gigabytes ahead of the drops (docs/security.md). What the sweep cannot reach (behind
    // UCX's oldest message when it is someone's) is dropped here as before.
    this.#table = new ConnectionTable((tag, word, known) => worker.sweepKnown(tag, word, known));
    worker.sweep(true);
    this.#buffers = new ReceiveBuffers(frameBytes);
    this.#awaiting = new AwaitedReceives(worker);
    this.#receiveAfterTurn = worker.wakeup === 'uv';
    this.#delivery = new Delivery(worker, this.#table);
    this.#strays = new StrayPayloads(worker, this.#table, (message) => this.drop(message));
  }

  /** Grows the receive buffer to at least `bytes` (from the next receive on). */
  ensureFrameBytes(bytes: number): void {
    this.#buffers.ensureFrameBytes(bytes);
  }

  /** Largest control message this worker can receive. */
  get frameBytes(): number { return this.#buffers.frameBytes; }

  stats(): DispatcherStats {
    return { ...this.#stats, ...this.#delivery.dropped(), connections: this.#table.size, leftHellos: this.#buffers.leftCount, leftHellosOpen: this.#buffers.leftOpen };
  }

  /** Whether control messages wait in UCX's queue unread (as of the last drain pass, every
   *  DRAIN_INTERVAL_MS): the loop is behind, and a peer whose frames wait behind others' is not
   *  silent. UCX queues every peer's control messages in one line, so 60 peers each filling its
   *  window with messages slow to decode (420 MiB) kept a server reading for about 19 s, and an
   *  idle client's keepalives waited behind them past its liveness time: the server closed it for
   *  silence (a helper session's attack, 2026-12-06). Liveness defers while this holds and a
   *  message of the connection's own waits (connection.ts). */
  get behind(): boolean { return this.#behind; }

  /** Draws a fresh connection key for `sink`; messages tagged with it go there. */
  register(sink: FrameSink): ConnectionKey {
    if (this.#stop.signal.aborted) throw new GdrpcError(Code.FAILED_PRECONDITION, 'the runtime is closing');
    const key = this.#table.register(sink);
    this.#start();
    return key;
  }

  unregister(key: ConnectionKey): void {
    const registered = this.#table.unregister(key);
    if (registered === undefined) return;
    this.#turns.forget(registered);
    // A receive that waits for its message stays with UCX (a matched receive cannot be
    // cancelled); what it brings is dropped (#awaitedDone).
    this.#awaiting.end(registered);
  }

  /** Whether an outgoing handshake waits for the HELLO naming `port`. */
  awaitsHello(port: number): boolean { return this.#table.awaitsHello(port); }

  /** Resolves once no outgoing handshake waits for the HELLO naming `port` (`signal`: give up). */
  portFree(port: number, signal: AbortSignal): Promise<void> { return this.#table.portFree(port, signal); }

  /** Routes the HELLO under helloKey(`port`) to `sink` (the outgoing handshake on that port),
   *  read apart from other connections' HELLOs. `ended` ends the wait; `release`, once the
   *  connection is gone, gives the port up (key-0 HELLOs naming it are dropped until then). */
  expectHello(port: number, sink: FrameSink): { ended: () => void; release: () => void } {
    const { end, release } = this.#table.expectHello(port, sink);
    this.#start();
    return {
      ended: () => {
        const entry = end();
        if (entry === undefined) return;
        this.#turns.forget(entry);
        // A receive of it that waits for its message stays with UCX; what it brings is dropped.
        this.#awaiting.end(entry);
      },
      release,
    };
  }

  /** Routes the next HELLO (key 0) that names no awaited port to `sink`. Outgoing handshakes whose
   *  port UCX did not tell take turns (docs/wire.md): the returned function ends this one's turn. */
  async awaitHelloTurn(sink: FrameSink, signal?: AbortSignal): Promise<() => void> {
    const endTurn = await this.#table.awaitHelloTurn(sink, signal);
    this.#start();
    return endTurn;
  }

  /** Drops a payload: received into one byte, which completes its sender with truncation. */
  drop(message: TakenMessage): void { this.#delivery.dropPayload(message); }

  /** Stops receiving (the worker is about to close). */
  stop(): void {
    this.#stop.abort();
    this.#delivery.stopped();
    // A message the watch took and did not tell stays taken: the worker is about to close.
    if (this.#watching && !this.worker.closed) this.worker.tagUnwatch();
    this.#watching = false;
    this.#running = false;
    this.#inTurns = false;
    this.#turns.reset();
    this.#awaiting.clear();
    this.#buffers.forgetLeft();
    clearTimeout(this.#recheck);
    if (this.#drainTimer !== undefined) clearInterval(this.#drainTimer);
    this.#drainTimer = undefined;
  }

  #start(): void {
    if (this.#running || this.#stop.signal.aborted) return;
    this.#running = true;
    this.#drainTimer ??= setInterval(() => this.drainPayloads(), DRAIN_INTERVAL_MS).unref();
    this.#newSlice();
    this.#receive();
  }

  // While reading keeps up, the watch takes each control message out of UCX's queue as it comes
  // (tagWatch, without a promise or an object per message: the binding writes the sender tag,
  // length and taken id into #takeSlot, and calls #onTaken from the wake-up that took it, or
  // answers true when one was queued already), and it is received by its id into the receive
  // buffer, as its connection's: most messages are whole when taken and are received inside the
  // call. A receive posted for any control message instead (as until 2026-12-06) is matched by UCX
  // to whatever comes first and cannot be given up once matched: a peer that sent a rendezvous
  // message under a made-up key and stopped its process held every connection's reading for a
  // second a time, without a token (test/security/partial-message.test.ts).

  /** Watches for the next control message, reading those already queued, until none is. A
   *  slice that ends on time with messages still queued means reading is behind: turns. */
  #receive(): void {
    while (!this.#stop.signal.aborted && !this.worker.closed) {
      if (this.#inTurns) return this.#takeTurns();
      if (this.#watching) return;
      this.#watching = true;
      if (!this.worker.tagWatch(CONTROL_BIT, CONTROL_MASK, this.#takeSlot, this.#onTaken)) return;
      this.#watching = false;
      this.#readTaken();
      if (this.#yielded()) {
        if (performance.now() - this.#sliceStart >= RECEIVE_SLICE_MS) this.#behindNow();
        return;
      }
    }
    this.#running = false;
  }

  /** The watch took a message (told from the wake-up that took it). */
  readonly #onTaken = (): void => {
    if (!this.#watching || this.#stop.signal.aborted) return;
    this.#watching = false;
    // The loop waited for this message: it came back from the event loop, a new slice.
    this.#newSlice();
    this.#readTaken();
    // Watched again here, the next message would stand between every message and its answer
    // (0.6-0.7 µs a side on the CPU box, measured for the receive posted before the watch): the
    // frames of the answer leave in a microtask at the end of this wake-up. With the uv wake-up the event loop's check
    // phase, where immediates run, comes after that and before the worker's next wake-up; whatever
    // arrives meanwhile waits in UCX's queue, and the watch takes it at once (payload drains wait
    // for it: drainPayloads). The thread wake-up's busy-poll passes follow each other without a
    // loop turn, which would hold the immediate (and the messages behind it) for as long as the
    // worker polls: there it watches again at once. In turns, the next one's turn comes from an
    // immediate too.
    if (this.#receiveAfterTurn || this.#inTurns) this.#schedule();
    else if (!this.#yielded()) this.#receive();
  };

  /** Reads the message the watch took (#takeSlot): received into the receive buffer as its
   *  connection's, or dropped unread when it is of none (its sender, a rendezvous', is told the
   *  receive was too short, and nothing waits for it), or when it is longer than the buffer (its
   *  connection is told). One whose rest is still on its way waits alone, and connections take
   *  turns meanwhile. */
  #readTaken(): void {
    const taken = this.#takeSlot;
    const registered = this.#table.entryOf(taken[0]!, taken[1]!);
    const length = taken[2]! + taken[3]! * 2 ** 32;
    const buffer = this.#buffers.buffer(registered?.hello === true);
    // A handshake refused for what was left under its key (#leaveHello) reads nothing more.
    if (registered === undefined || registered.refused === true || length > buffer.bytes.length) {
      const message = { senderTag: BigInt(taken[0]!) | (BigInt(taken[1]!) << 32n), length, taken: taken[4]! };
      // Too long for a HELLO: not one, and its handshake waits on for the real one.
      if (registered === undefined || registered.hello === true) return this.#delivery.dropControl(message);
      this.#delivery.discard(message);
      this.#delivery.tell(() => registered.sink.onOversized(length));
      return;
    }
    const slot = this.#buffers.slot;
    const id = this.worker.requestId();
    let now: boolean;
    try {
      now = this.worker.tagRecvTakenInto(taken[4]!, buffer.bytes, id, slot, (error?: unknown) => this.#awaitedDone(registered, buffer, error));
    } catch (error) {
      // It is gone (UCX refused it): as a message that failed.
      this.#delivery.failed(buffer, error);
      return;
    }
    if (now) {
      // Whole when taken: its sender tag and length are the take's.
      this.#delivery.deliver(buffer, taken);
      return;
    }
    if (registered.hello === true) return this.#leaveHello(registered, buffer);
    this.#awaitAlone(registered, buffer, slot, id);
    this.#behindNow();
  }

  /** Reading fell behind: from the next receive on, connections take turns. A watch still armed
   *  is disarmed (it could take a message behind one a turn reads), and turns begin from an
   *  immediate; a message it took and had not told yet is read first. */
  #behindNow(): void {
    if (this.#inTurns) return;
    this.#inTurns = true;
    this.#stats.backlogs += 1;
    this.#turns.reset();
    if (!this.#watching) return;
    this.#watching = false;
    if (this.worker.tagUnwatch()) this.#readTaken();
    this.#schedule();
  }

  // Turns. UCX keeps every peer's control messages in one line, and reading them in that order let
  // 8 peers that kept to their windows, sending messages slow to decode (maps of many keys), hold an
  // honest client's ping behind all of their windows: 1.1 s at the median, for as long as they
  // went on (a helper session's attack, 2026-12-06). Behind, each receive names one connection's
  // tag (UCX finds a tag's messages through a hash, and keeps them in the order they came), in the
  // order read-turns.ts gives: deficit round robin over the CPU time each message took to read, the
  // line's turn ending each round. The line looks at the oldest control message first: one of a
  // connection is read as that connection's, one of no connection is dropped unread, and when
  // there is none, reading has caught up: the watch takes each message as it comes again. A
  // receive that waits for the rest of its message (a rendezvous, a message in eager fragments)
  // waits alone: it keeps its buffer, its connection's later messages wait for it, and the others
  // go on (a peer that sent rendezvous messages and stopped its process held every connection's
  // reading, a second a message, before: a helper session's attack, 2026-12-06). Past
  // STALLED_RECEIVE_MS its connection is closed.

  /** Reads in turns until the slice ends, nothing can be read, or reading has caught up. */
  #takeTurns(): void {
    clearTimeout(this.#recheck);
    this.#recheck = undefined;
    while (this.#inTurns && !this.#stop.signal.aborted && !this.worker.closed) {
      const turn = this.#turns.next();
      const done = turn === this.#turns.line ? this.#lineTurn() : this.#connectionTurn(turn as Registered);
      if (done === 'caught up') return this.#receive();
      if (done === 'blocked') {
        // Every message queued waits for an earlier one of its connection: look again shortly.
        this.#recheck = setTimeout(this.#resume, BLOCKED_RECHECK_MS);
        return;
      }
      if (done === 'read' && this.#yielded()) return;
    }
  }

  /** A connection's turn: its next message, if one is queued and none of its own is on its way. */
  #connectionTurn(registered: Registered): 'read' | 'none' {
    if (registered.awaiting !== undefined || this.worker.tagProbe(registered.tag, EXACT_MASK) === null) {
      this.#turns.end();
      return 'none';
    }
    this.#receiveOf(registered);
    return 'read';
  }

  /** The line's turn: the oldest control message, read as its connection's, or dropped when it is
   *  of none; 'blocked' when it cannot be read yet and nothing else was this round. */
  #lineTurn(): 'read' | 'none' | 'blocked' | 'caught up' {
    const oldest = this.worker.tagProbe(CONTROL_BIT, CONTROL_MASK);
    if (oldest === null) {
      // Caught up, unless a connection's message is still on its way: the watch could take that
      // connection's next one before it.
      if (this.#awaiting.size > 0) return this.#lineWaits();
      this.#caughtUp();
      return 'caught up';
    }
    const registered = this.#table.entryOf(Number(oldest.senderTag & 0xffff_ffffn), Number(oldest.senderTag >> 32n));
    if (registered === undefined || registered.refused === true) {
      // Of no connection (gone, never was, or a guess), or of a refused handshake (#leaveHello):
      // taken out without its bytes.
      const message = this.worker.tagProbe(oldest.senderTag, EXACT_MASK, { remove: true });
      if (message !== null) this.#delivery.dropControl(message);
      this.#turns.busy();
      this.#turns.end();
      return 'read';
    }
    if (registered.awaiting !== undefined) return this.#lineWaits();
    this.#receiveOf(registered);
    return 'read';
  }

  /** The line can read nothing yet (a connection's earlier message is on its way): its turn ends,
   *  'blocked' when nothing else was read this round either. */
  #lineWaits(): 'none' | 'blocked' {
    const idle = this.#turns.idle;
    this.#turns.end();
    return idle ? 'blocked' : 'none';
  }

  /** Receives `registered`'s next message (one is queued) into the receive buffer; when it waits
   *  for the rest of its message, the buffer and slot stay with it and new ones go on. */
  #receiveOf(registered: Registered): void {
    const buffer = this.#buffers.buffer(registered.hello === true);
    const slot = this.#buffers.slot;
    const id = this.worker.requestId();
    let now: boolean;
    try {
      now = this.worker.tagRecvInto(buffer.bytes, registered.tag, EXACT_MASK, id, slot, (error?: unknown) => this.#awaitedDone(registered, buffer, error));
    } catch (error) {
      // Failed at once (UCX refused it): the message is gone.
      this.#delivery.failed(buffer, error);
      this.#turns.charge(this.#turns.current, registered, 0);
      return;
    }
    if (now) {
      this.#deliverInTurn(buffer, slot);
      return;
    }
    if (registered.hello === true) this.#leaveHello(registered, buffer);
    else this.#awaitAlone(registered, buffer, slot, id);
    this.#turns.end();
  }

  /** A receive under `registered`'s HELLO key did not complete at once: no handshake waits for it,
   *  it is left to UCX (receive-buffers.ts). Past its bounds the handshake is refused at once (what
   *  else comes under its key is dropped unread: the second review of this change found a refusal
   *  left to the handshake's end let every message of the same slice be left too) and told
   *  (onStalled), and fails. No HELLO entry ever waits alone, which would keep the line's turn,
   *  and with it every other handshake's HELLO, behind it (the first review). */
  #leaveHello(registered: Registered, buffer: ReceiveBuffer): void {
    if (this.#buffers.leave(buffer, registered)) return;
    registered.refused = true;
    this.#delivery.tell(() => registered.sink.onStalled());
  }

  /** `registered`'s receive `id` into `buffer` waits for the rest of its message: it keeps the
   *  buffer and slot, and new ones go on; its connection's later messages wait for it. */
  #awaitAlone(registered: Registered, buffer: ReceiveBuffer, slot: Slot, id: number): void {
    this.#awaiting.add(registered, buffer, slot, id);
    this.#buffers.keep(buffer);
  }

  /** A receive that waited for its message in a turn completed. */
  #awaitedDone(registered: Registered, buffer: ReceiveBuffer, error: unknown): void {
    // Left to UCX (receive-buffers.ts): what came whole goes where its tag says now (a HELLO to
    // its handshake, if that still waits).
    const leftSlot = this.#buffers.takeLeft(buffer);
    if (leftSlot !== undefined) {
      if (error === undefined && !this.#stop.signal.aborted) this.#delivery.deliver(buffer, leftSlot);
      return;
    }
    const awaited = registered.awaiting;
    // Given up on (its connection closed, or the dispatcher stopped): what came is dropped.
    if (awaited?.buffer !== buffer || this.#stop.signal.aborted) return;
    this.#awaiting.end(registered);
    if (error === undefined) this.#deliverInTurn(buffer, awaited.slot);
    else this.#delivery.failed(buffer, error);
    if (this.#inTurns) this.#schedule();
  }

  /** Gives up on receives that wait for the rest of their message while control messages wait in
   *  UCX's queue (awaited-receives.ts): their connections are closed. `queued`: a control message
   *  waits. A connection whose peer sent past its window meanwhile (its held line is over) is
   *  closed at once. */
  #checkAwaited(queued: boolean): void {
    for (const [registered, bytes] of this.#awaiting.overrun()) {
      this.#delivery.tell(() => registered.sink.onHeldOverrun?.(bytes));
      if (this.#inTurns) this.#schedule();
    }
    for (const registered of this.#awaiting.stalled(queued, performance.now())) {
      this.#stats.stalledReceives += 1;
      this.#delivery.tell(() => registered.sink.onStalled());
      if (this.#inTurns) this.#schedule();
    }
  }

  /** Delivers a message received in a turn, charging the CPU time it took to its connection (to
   *  the line when it has none; read-turns.ts). */
  #deliverInTurn(buffer: ReceiveBuffer, slot: Slot): void {
    const turn = this.#turns.current;
    const holder = this.#table.registeredOf(slot[0]!, slot[1]!) ?? this.#turns.line;
    const start = this.readingClock();
    this.#delivery.deliver(buffer, slot);
    this.#stats.readInTurns += 1;
    this.#turns.charge(turn, holder, this.readingClock() - start);
  }

  #caughtUp(): void {
    this.#inTurns = false;
    this.#turns.reset();
  }

  /** Receives again after a pause (a message that had been waited for, a slice's end): a new slice. */
  readonly #resume = (): void => {
    this.#scheduled = false;
    if (this.#stop.signal.aborted) return;
    this.#newSlice();
    this.#receive();
  };

  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(this.#resume);
  }

  /** Ends a slice of receiving every RECEIVE_SLICE_MESSAGES messages or RECEIVE_SLICE_MS: the next
   *  read comes from setImmediate. Messages already queued are read without returning to
   *  the event loop, so a flood would otherwise starve timers (keepalives, deadlines). */
  #yielded(): boolean {
    this.#inSlice += 1;
    if (this.#inSlice < RECEIVE_SLICE_MESSAGES && performance.now() - this.#sliceStart < RECEIVE_SLICE_MS) return false;
    this.#schedule();
    return true;
  }

  #newSlice(): void {
    this.#sliceStart = performance.now();
    this.#inSlice = 0;
  }

  /** At close, once every endpoint is closed: drops every message left in UCX's unexpected
   *  queue (stray-payloads.ts dropAll; dropped control messages count as droppedPayloads too).
   *  Returns how many it dropped. */
  drainForClose(): number { return this.#strays.dropAll(); }

  /** Takes the tensor payloads waiting without a receive out of UCX's queue and hands each to its
   *  connection, dropping those of no connection. Runs on a timer; tests call it directly. */
  drainPayloads(): void {
    if (this.#stop.signal.aborted || this.worker.closed) return;
    // Payloads behind a control message not read yet may be announced by it: their drain waits
    // for the loop, a few passes at most (StrayPayloads.take).
    const controlQueued = this.worker.tagProbe(CONTROL_BIT, CONTROL_MASK) !== null;
    this.#behind = controlQueued;
    this.#checkAwaited(controlQueued);
    // Queued while the loop reads or waits (a receive waiting for its message's rest, a long
    // read): the next read takes turns.
    if (controlQueued) this.#behindNow();
    this.#strays.take(controlQueued);
  }
}
