// Routes what arrives on the process's one worker to its connections. UCX tag matching does not
// say which endpoint sent a message, so the tag's connection key is what ties a message to its
// connection (wire/tag.ts): the key is random and only that connection's peer learns it, so no
// other peer can put a message into the connection. Control messages come through one posted
// receive, one at a time, which keeps each connection's frames in the order they were sent.
// Tensor payloads that no receive was posted for wait in UCX's unexpected queue; a periodic drain
// takes them out, hands them to their connection (which holds a few, briefly, for a frame still
// on its way) and drops the rest, so nothing a peer sends is queued forever.
import type { TakenMessage, Worker } from '../../ucx/index.ts';
import { Code, GdrpcError } from '../../errors.ts';
import { CONTROL_BIT, CONTROL_MASK, ConnectionKey, HELLO_KEY, controlKey, dataParts } from '../../wire/tag.ts';

/** What a connection exposes to the dispatcher. */
export interface FrameSink {
  /** A control message for this connection; `bytes` is a private copy. */
  onMessage(bytes: Uint8Array): void;
  /** A control message longer than the receive buffer (truncated by UCX, contents lost). */
  onOversized(length: number): void;
  /** A tensor payload nobody had posted a receive for; the sink receives or drops it. */
  onStrayData(message: TakenMessage, low: number): void;
}

/** How often unexpected tensor payloads are collected. */
export const DRAIN_INTERVAL_MS = 25;
/** Control messages read before the loop yields to timers and I/O (whichever comes first). */
const RECEIVE_SLICE_MESSAGES = 256;
const RECEIVE_SLICE_MS = 4;
/** Most payloads taken in one drain pass, so that a flood cannot hold the event loop. */
const DRAIN_BATCH = 4096;
/** Drain passes in a row that may wait for the control loop (see drainPayloads). */
const MAX_DRAIN_DEFERRALS = 8;

/** Counters of what the dispatcher dropped (for tests and diagnostics). */
export interface DispatcherStats { unattributed: number; droppedPayloads: number; connections: number }

/** Routes control messages and stray payloads of one worker to its connections. */
export class Dispatcher {
  readonly #sinks = new Map<bigint, FrameSink>();
  readonly #byPrefix = new Map<number, FrameSink>();
  #hello: FrameSink | undefined;
  #helloQueue: Array<() => void> = [];
  #buffer: Buffer;
  #stop = new AbortController();
  #running = false;
  #drainTimer: NodeJS.Timeout | undefined;
  readonly #stats: DispatcherStats = { unattributed: 0, droppedPayloads: 0, connections: 0 };
  /** Drain passes in a row put off because a control message was waiting. */
  #deferrals = 0;
  static readonly #sink = new Uint8Array(1);

  constructor(private readonly worker: Worker, frameBytes: number) {
    this.#buffer = Buffer.allocUnsafe(frameBytes);
  }

  /** Grows the receive buffer to at least `bytes` (from the next receive on). */
  ensureFrameBytes(bytes: number): void {
    if (bytes > this.#buffer.length) this.#buffer = Buffer.allocUnsafe(bytes);
  }

  /** Largest control message this worker can receive. */
  get frameBytes(): number { return this.#buffer.length; }

  stats(): DispatcherStats { return { ...this.#stats, connections: this.#sinks.size }; }

  /** Draws a fresh connection key for `sink`; messages tagged with it go there. */
  register(sink: FrameSink): ConnectionKey {
    if (this.#stop.signal.aborted) throw new GdrpcError(Code.FAILED_PRECONDITION, 'the runtime is closing');
    const key = ConnectionKey.draw((prefix) => !this.#byPrefix.has(prefix));
    this.#sinks.set(key.value, sink);
    this.#byPrefix.set(key.prefix, sink);
    this.#start();
    return key;
  }

  unregister(key: ConnectionKey): void {
    if (this.#sinks.get(key.value) === undefined) return;
    this.#sinks.delete(key.value);
    this.#byPrefix.delete(key.prefix);
  }

  /** Routes the next HELLO (key 0) to `sink`. Outgoing handshakes take turns (docs/wire.md): the
   *  returned function ends this one's turn. */
  async awaitHelloTurn(sink: FrameSink): Promise<() => void> {
    while (this.#hello !== undefined) await new Promise<void>((resolve) => this.#helloQueue.push(resolve));
    this.#hello = sink;
    this.#start();
    return () => {
      if (this.#hello !== sink) return;
      this.#hello = undefined;
      this.#helloQueue.shift()?.();
    };
  }

  /** Drops a payload: received into one byte, which completes its sender with truncation. */
  drop(message: TakenMessage): void {
    this.#stats.droppedPayloads += 1;
    this.worker.tagRecvTaken(message, Dispatcher.#sink).catch(() => { /* truncation is the point */ });
  }

  /** Stops receiving (the worker is about to close). */
  stop(): void {
    this.#stop.abort();
    if (this.#drainTimer !== undefined) clearInterval(this.#drainTimer);
    this.#drainTimer = undefined;
  }

  #start(): void {
    if (this.#running || this.#stop.signal.aborted) return;
    this.#running = true;
    this.#drainTimer ??= setInterval(() => this.drainPayloads(), DRAIN_INTERVAL_MS).unref();
    void this.#loop();
  }

  async #loop(): Promise<void> {
    const signal = this.#stop.signal;
    let sliceStart = performance.now();
    let inSlice = 0;
    while (!signal.aborted) {
      try {
        const buffer = this.#buffer;
        const { senderTag, length } = await this.worker.tagRecv(buffer, CONTROL_BIT, CONTROL_MASK, { signal });
        this.#route(senderTag, Buffer.from(buffer.subarray(0, length)));
      } catch (error) {
        if (signal.aborted) break;
        this.#onReceiveError(GdrpcError.from(error));
      }
      // A receive whose message is already queued completes at once, so a flood would be read in
      // one run of microtasks and starve timers (keepalives, deadlines): yield to the event loop
      // every few milliseconds of receiving.
      inSlice += 1;
      if (inSlice >= RECEIVE_SLICE_MESSAGES || performance.now() - sliceStart >= RECEIVE_SLICE_MS) {
        await new Promise<void>((resolve) => setImmediate(resolve));
        sliceStart = performance.now();
        inSlice = 0;
      }
    }
    this.#running = false;
  }

  #sinkOf(tag: bigint): FrameSink | undefined {
    const key = controlKey(tag);
    if (key === undefined) return undefined;
    return key === HELLO_KEY ? this.#hello : this.#sinks.get(key);
  }

  #route(tag: bigint, bytes: Uint8Array): void {
    const sink = this.#sinkOf(tag);
    // A message for no live connection (gone, never was, or a guess) has nobody to answer: drop it.
    if (sink === undefined) this.#stats.unattributed += 1;
    else sink.onMessage(bytes);
  }

  #onReceiveError(error: GdrpcError): void {
    const tag = error.details?.senderTag;
    if (/truncat/i.test(error.rawMessage) && typeof tag === 'bigint') {
      const length = typeof error.details?.length === 'number' ? error.details.length : -1;
      const sink = this.#sinkOf(tag);
      if (sink === undefined) this.#stats.unattributed += 1;
      else sink.onOversized(length);
    }
    // Without the tag there is no one to tell; the message is lost and the loop goes on.
  }

  /** Takes the tensor payloads waiting without a receive out of UCX's queue and hands each to its
   *  connection, dropping those of no connection. Runs on a timer; tests call it directly. */
  drainPayloads(): void {
    if (this.#stop.signal.aborted || this.worker.closed) return;
    // A peer sends a frame before the payloads it announces, and UCX keeps one peer's messages in
    // order: while a control message still waits to be read, the payloads behind it may be its
    // own, announced as soon as the loop reads it. Taking them now would count them as strays
    // (a batch of many tensors overran the limit so). Wait for the loop, a few passes at most, so
    // that a peer flooding control messages cannot keep its strays in UCX's queue for ever. (A
    // control receive that has completed but is not yet settled in JS is the binding's to see:
    // tagProbe with `remove` takes nothing then.)
    if (this.#deferrals < MAX_DRAIN_DEFERRALS && this.worker.tagProbe(CONTROL_BIT, CONTROL_MASK) !== null) {
      this.#deferrals += 1;
      return;
    }
    this.#deferrals = 0;
    for (let taken = 0; taken < DRAIN_BATCH; taken += 1) {
      // Bit 63 clear: every non-control message, whatever its class byte.
      const message = this.worker.tagProbe(0n, CONTROL_MASK, { remove: true });
      if (message === null) return;
      const parts = dataParts(message.senderTag);
      const sink = parts === undefined ? undefined : this.#byPrefix.get(parts.prefix);
      if (sink === undefined) this.drop(message);
      else sink.onStrayData(message, parts!.low);
    }
  }
}
