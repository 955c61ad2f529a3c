// Routes what arrives on the process's one worker to its connections. UCX tag matching does not
// say which endpoint sent a message, so the tag's connection key is what ties a message to its
// connection (wire/tag.ts): the key is random and only that connection's peer learns it, so no
// other peer can put a message into the connection. Control messages are read one at a time,
// oldest first, which keeps each connection's frames in the order they were sent; each is taken
// out of UCX's queue before any of it is received (tagWatch), so that its sender is known first.
// While they come faster than they are read, connections take turns (#takeTurns), so that no
// peer's messages, however slow to decode, hold everyone else's behind them. Tensor payloads
// that no receive was posted for are collected by a periodic drain (stray-payloads.ts).
import { ownTimeClock, type TakenMessage, type Worker } from '../../ucx/index.ts';
import { Code, GdrpcError } from '../../errors.ts';
import { CONTROL_BIT, CONTROL_MASK, type ConnectionKey } from '../../wire/tag.ts';
import { DRAIN_INTERVAL_MS, STALLED_RECEIVE_MS } from './awaited-receives.ts';
import { StrayPayloads } from './stray-payloads.ts';
import { ReceiveBuffers } from './receive-buffers.ts';
import { ConnectionTable, type FrameSink } from './connection-table.ts';
import { Delivery } from './delivery.ts';
import { Turns } from './turns.ts';

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
   *  (turns.ts checkAwaited). */
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
  readonly #delivery: Delivery;
  /** Reading once it is behind: connections take turns (#takeTurns, turns.ts). */
  readonly #turns: Turns;
  readonly #strays: StrayPayloads;
  /** A #resume is scheduled (setImmediate), or a look again when turns were blocked. */
  #scheduled = false;
  #recheck: NodeJS.Timeout | undefined;
  /** The last drain pass found a control message waiting in UCX's queue (behind). */
  #behind = false;

  /** Whether the watch after a message it waited for waits for the event loop's turn (#onTaken). */
  readonly #receiveAfterTurn: boolean;

  /** `readingClock`: what a message read in turns is charged by, in ms (read-turns.ts): the
   *  thread's own time (ucx ownTimeClock) unless told. */
  constructor(private readonly worker: Worker, frameBytes: number, readingClock: () => number = ownTimeClock()) {
    // What comes under a tag of no entry is dropped inside the binding, after the progress pass
    // that brought it (docs/binding.md "The sweep"): a flood under made-up keys, read here, had UCX
    // hold gigabytes ahead of the drops (docs/security.md). What the sweep cannot reach (behind
    // UCX's oldest message when it is someone's) is dropped here as before.
    this.#table = new ConnectionTable((tag, word, known) => worker.sweepKnown(tag, word, known));
    worker.sweep(true);
    this.#buffers = new ReceiveBuffers(frameBytes);
    this.#receiveAfterTurn = worker.wakeup === 'uv';
    this.#delivery = new Delivery(worker, this.#table);
    this.#turns = new Turns(worker, this.#table, this.#buffers, this.#delivery, readingClock, this.#stop.signal, () => this.#schedule());
    this.#strays = new StrayPayloads(worker, this.#table, (message) => this.drop(message));
  }

  /** Grows the receive buffer to at least `bytes` (from the next receive on). */
  ensureFrameBytes(bytes: number): void {
    this.#buffers.ensureFrameBytes(bytes);
  }

  /** Largest control message this worker can receive. */
  get frameBytes(): number { return this.#buffers.frameBytes; }

  stats(): DispatcherStats {
    return { ...this.#turns.stats, ...this.#delivery.dropped(), connections: this.#table.size, leftHellos: this.#buffers.leftCount, leftHellosOpen: this.#buffers.leftOpen };
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
    // A receive that waits for its message stays with UCX (a matched receive cannot be
    // cancelled); what it brings is dropped (turns.ts awaitedDone).
    this.#turns.forget(registered);
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
        // A receive of it that waits for its message stays with UCX; what it brings is dropped.
        this.#turns.forget(entry);
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
    this.#turns.stop();
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
      if (this.#turns.on) return this.#takeTurns();
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
    if (this.#receiveAfterTurn || this.#turns.on) this.#schedule();
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
    // A handshake refused for what was left under its key (turns.ts leaveHello) reads nothing more.
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
      now = this.worker.tagRecvTakenInto(taken[4]!, buffer.bytes, id, slot, (error?: unknown) => this.#turns.awaitedDone(registered, buffer, error));
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
    if (registered.hello === true) return this.#turns.leaveHello(registered, buffer);
    this.#turns.awaitAlone(registered, buffer, slot, id);
    this.#behindNow();
  }

  /** Reading fell behind: from the next receive on, connections take turns. A watch still armed
   *  is disarmed (it could take a message behind one a turn reads), and turns begin from an
   *  immediate; a message it took and had not told yet is read first. */
  #behindNow(): void {
    if (this.#turns.on) return;
    this.#turns.begin();
    if (!this.#watching) return;
    this.#watching = false;
    if (this.worker.tagUnwatch()) this.#readTaken();
    this.#schedule();
  }

  /** Reads in turns (turns.ts) until the slice ends, nothing can be read, or reading has caught
   *  up. */
  #takeTurns(): void {
    clearTimeout(this.#recheck);
    this.#recheck = undefined;
    while (this.#turns.on && !this.#stop.signal.aborted && !this.worker.closed) {
      const done = this.#turns.take();
      if (done === 'caught up') return this.#receive();
      if (done === 'blocked') {
        // Every message queued waits for an earlier one of its connection: look again shortly.
        this.#recheck = setTimeout(this.#resume, BLOCKED_RECHECK_MS);
        return;
      }
      if (done === 'read' && this.#yielded()) return;
    }
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
    this.#turns.checkAwaited(controlQueued);
    // Queued while the loop reads or waits (a receive waiting for its message's rest, a long
    // read): the next read takes turns.
    if (controlQueued) this.#behindNow();
    this.#strays.take(controlQueued);
  }
}
