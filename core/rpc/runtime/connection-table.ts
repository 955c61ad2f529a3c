// Which connection a tag names (wire/tag.ts). UCX tag matching does not say which endpoint sent a
// message, so a connection's key, drawn at random and told only to its peer, is what ties a
// message to it: a control tag names a connection by the key's 24-bit prefix (unique among this
// worker's keys) and its secret 32-bit low word, all of it checked. The prefix 0 is the
// handshake's HELLO: with the client's port as its low word (the port the server saw the
// connection come from), that of the outgoing handshake on that port, its own entry, so that
// what another peer sends under another port's key or key 0 holds nothing of it; key 0 itself,
// that of the handshake whose turn it is (one whose address UCX did not tell: docs/wire.md
// "Handshake and admission").
import type { StallWatch } from './stall-watch.ts';
import type { TurnHolder } from './read-turns.ts';
import type { TakenMessage } from '../../ucx/index.ts';
import type { ReceiveBuffer } from './receive-buffer.ts';
import { ConnectionKey, controlPrefix, controlTag, dataWord, helloKey } from '../../wire/tag.ts';
import { decodeFrame } from '../../wire/codec.ts';
import { FrameKind } from '../../wire/frames.ts';
import { unpackMessage } from '../../wire/message.ts';

/** What a connection exposes to the dispatcher. */
export interface FrameSink {
  /** A control message for this connection: `source[0, length)`, the receive buffer itself,
   *  valid only during the call (the next receive overwrites it); past `length` it holds zeros. */
  onMessage(source: Uint8Array, length: number): void;
  /** A control message longer than the receive buffer (dropped unread). */
  onOversized(length: number): void;
  /** A tensor payload nobody had posted a receive for; the sink receives or drops it.
   *  `framesWaiting`: control messages of this connection's own wait to be read. */
  onStrayData(message: TakenMessage, low: number, framesWaiting: boolean): void;
  /** A control message of this connection, taken and being received, has not arrived whole
   *  within receiveStallMs() while other messages waited: the connection cannot be read past it. */
  onStalled(): void;
  /** How long a message of this connection may take to arrive whole while other messages wait
   *  (a connection's liveness time); left out, STALLED_RECEIVE_MS. */
  receiveStallMs?(): number;
  /** What the peer may still send before this side reads more of it (its message window): while
   *  a message of its own waits alone, the binding's sweep holds its later ones up to `bytes`,
   *  each weighing its length and `perMessage` (Worker.sweepHold). Undefined: none are held. */
  holdCap?(): { bytes: number; perMessage: number };
  /** The peer sent more than holdCap() said while a message of its own waited alone: `bytes`
   *  held. The connection is closed. */
  onHeldOverrun?(bytes: number): void;
}

/** A receive that waits for the rest of its message (rendezvous, or eager fragments): its own
 *  buffer and slot, since the turns go on with others meanwhile. */
export interface Awaited { buffer: ReceiveBuffer; slot: Uint32Array; id: number; watch: StallWatch }

/** A registered connection: its sink, its key's low 32 bits (the prefix is its map key), the tag
 *  of its control messages, its balance of reading time in turns, and its receive in a turn that
 *  waits for its message, if any (its later messages wait for it). `hello`: a handshake's entry,
 *  under a HELLO key, which takes one small message and waits for none (receive-buffers.ts);
 *  `left`: its receives left to UCX and not completed; `refused`: its handshake was failed for
 *  them, and what else comes under its key is dropped unread. */
export interface Registered extends TurnHolder { sink: FrameSink; low: number; tag: bigint; awaiting: Awaited | undefined; hello?: true; left?: number; refused?: boolean }

/** Told of every tag that comes to name an entry (`known` true) or names one no longer: the
 *  control tag, and the high word of its payload tags (0: none). The worker's sweep drops what
 *  arrives under any other tag (Worker.sweep). */
export type KnownTags = (controlTag: bigint, dataWord: number, known: boolean) => void;

/** The connections of one worker, by key. */
export class ConnectionTable {
  /** By key prefix, unique among this worker's keys (ConnectionKey.draw). */
  readonly #byPrefix = new Map<number, Registered>();
  #hello: FrameSink | undefined;
  readonly #helloQueue: Array<() => void> = [];
  /** Outgoing handshakes waiting for their HELLO, by this side's port of their connection: each
   *  an entry of its own (helloKey(port)), read by the line's turn like key 0, but never held up
   *  by a message under another key. */
  readonly #helloByPort = new Map<number, Registered>();
  /** Ports of this process's connections made by port, for as long as each lives: a key-0 HELLO
   *  naming one is never a connection-in-turns' (a hostile server holding the turn took the
   *  key-0 copy of another connection's HELLO, and with it that connection's key). */
  readonly #claimed = new Map<number, number>();
  /** Handshakes that got a port another one waits on, waiting for it to be free. */
  readonly #portQueue = new Map<number, Array<() => void>>();
  /** The handshake's HELLO (key 0) as a connection: read by the line's turn alone (read-turns.ts). */
  readonly hello: Registered;

  constructor(private readonly known: KnownTags) {
    const table = this;
    const hello: FrameSink = {
      onMessage: (source, length) => table.#helloOf(source, length)?.onMessage(source, length),
      onOversized: (length) => table.#hello?.onOversized(length),
      onStrayData: (message, low, framesWaiting) => table.#hello?.onStrayData(message, low, framesWaiting),
      onStalled: () => table.#hello?.onStalled(),
    };
    this.hello = { sink: hello, low: 0, tag: controlTag(0n), balance: 0, awaiting: undefined, hello: true };
  }

  get size(): number { return this.#byPrefix.size; }

  /** The registered connections, in the order they came (the turns' order). */
  values(): IterableIterator<Registered> { return this.#byPrefix.values(); }

  /** Draws a fresh connection key for `sink`; messages tagged with it go there. */
  register(sink: FrameSink): ConnectionKey {
    const key = ConnectionKey.draw((prefix) => !this.#byPrefix.has(prefix));
    const tag = controlTag(key.value);
    this.#byPrefix.set(key.prefix, { sink, low: key.low, tag, balance: 0, awaiting: undefined });
    this.known(tag, dataWord(key.prefix), true);
    return key;
  }

  /** Removes `key`'s connection; returns it (undefined when the key is not, or no longer, one). */
  unregister(key: ConnectionKey): Registered | undefined {
    // Prefix and low word together are the whole key.
    const registered = this.#byPrefix.get(key.prefix);
    if (registered?.low !== key.low) return undefined;
    this.#byPrefix.delete(key.prefix);
    this.known(registered.tag, dataWord(key.prefix), false);
    return registered;
  }

  /** Routes the HELLO under helloKey(`port`) to `sink`, without a turn: returns the function that
   *  ends the wait (HELLO came, or the handshake gave up), which returns the entry when it was
   *  still there, and the one that gives the port up once the connection is gone. */
  expectHello(port: number, sink: FrameSink): { end: () => Registered | undefined; release: () => void } {
    if (this.#helloByPort.has(port)) throw new Error(`two handshakes wait for HELLO on port ${port}`);
    const entry: Registered = { sink, low: port, tag: controlTag(helloKey(port)), balance: 0, awaiting: undefined, hello: true };
    this.#helloByPort.set(port, entry);
    this.known(entry.tag, 0, true);
    this.#claimed.set(port, (this.#claimed.get(port) ?? 0) + 1);
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        const left = (this.#claimed.get(port) ?? 1) - 1;
        if (left > 0) this.#claimed.set(port, left);
        else this.#claimed.delete(port);
      },
      end: () => {
        if (this.#helloByPort.get(port) !== entry) return undefined;
        this.#helloByPort.delete(port);
        this.known(entry.tag, 0, false);
        const waiting = this.#portQueue.get(port);
        this.#portQueue.delete(port);
        for (const wake of waiting ?? []) wake();
        return entry;
      },
    };
  }

  /** Resolves once no handshake waits for a HELLO naming `port`; `signal` gives up the wait
   *  (rejecting with its reason). */
  async portFree(port: number, signal: AbortSignal): Promise<void> {
    while (this.#helloByPort.has(port)) {
      const queue = this.#portQueue.get(port) ?? [];
      this.#portQueue.set(port, queue);
      await wakeOrAbort(queue, signal);
    }
  }

  awaitsHello(port: number): boolean { return this.#helloByPort.has(port); }

  /** The handshake a HELLO under key 0 is for: the turn's, unless it names (`cp`) the port of a
   *  connection made by port, waiting for its HELLO or made (a server sends both copies), or
   *  names none while such connections exist. */
  #helloOf(source: Uint8Array, length: number): FrameSink | undefined {
    if (this.#hello === undefined || this.#claimed.size === 0) return this.#hello;
    const port = helloPort(source, length);
    return port === undefined || this.#claimed.has(port) ? undefined : this.#hello;
  }

  /** Routes the next HELLO (key 0) to `sink` once no other handshake has the turn; the returned
   *  function ends this one's turn. `signal` gives up the wait (rejecting with its reason). */
  async awaitHelloTurn(sink: FrameSink, signal?: AbortSignal): Promise<() => void> {
    while (this.#hello !== undefined) await wakeOrAbort(this.#helloQueue, signal);
    this.#hello = sink;
    this.known(this.hello.tag, 0, true);
    // A new handshake's turn: the last one's refusal is not its. The key-0 receives left open
    // still count against it (any peer can send under key 0, no port needed).
    this.hello.refused = false;
    return () => {
      if (this.#hello !== sink) return;
      this.#hello = undefined;
      this.known(this.hello.tag, 0, false);
      this.#helloQueue.shift()?.();
    };
  }

  /** The connection a control tag's two 32-bit words name (the HELLO's sink for key 0). */
  sinkOfWords(low: number, high: number): FrameSink | undefined {
    const prefix = controlPrefix(high);
    if (prefix === undefined) return undefined;
    if (prefix === 0) return low === 0 ? (this.#hello !== undefined ? this.hello.sink : undefined) : this.#helloByPort.get(low)?.sink;
    return this.registeredOf(low, high)?.sink;
  }

  /** The entry a control tag's two words name: a registered connection, or `hello` for key 0
   *  while a handshake waits for its HELLO. */
  entryOf(low: number, high: number): Registered | undefined {
    if (controlPrefix(high) !== 0) return this.registeredOf(low, high);
    return low === 0 ? (this.#hello !== undefined ? this.hello : undefined) : this.#helloByPort.get(low);
  }

  /** The registered connection a control tag's two words name (not the handshake's key 0). */
  registeredOf(low: number, high: number): Registered | undefined {
    const prefix = controlPrefix(high);
    if (prefix === undefined || prefix === 0) return undefined;
    const registered = this.#byPrefix.get(prefix);
    return registered !== undefined && registered.low === low ? registered : undefined;
  }

  /** The connection a tensor payload's key prefix names (its low word is the connection's to check). */
  byPrefix(prefix: number): Registered | undefined { return this.#byPrefix.get(prefix); }

  sinkOf(tag: bigint): FrameSink | undefined {
    return this.sinkOfWords(Number(tag & 0xffff_ffffn), Number(tag >> 32n));
  }
}

/** The client port a HELLO message names (`cp`), or undefined: not a HELLO, none named, or not
 *  readable (the handshake it reaches reports what is wrong with it). `source` holds zeros past
 *  `length`, as decodeFrame asks. */
function helloPort(source: Uint8Array, length: number): number | undefined {
  try {
    const [first] = unpackMessage(source, length);
    if (first?.kind !== FrameKind.Hello) return undefined;
    const frame = decodeFrame(first);
    return frame.kind === FrameKind.Hello ? frame.body.cp : undefined;
  } catch {
    return undefined;
  }
}

/** Waits in `queue` until its wake-up is called, or `signal` aborts (rejecting with its reason,
 *  and out of the queue). */
function wakeOrAbort(queue: Array<() => void>, signal: AbortSignal | undefined): Promise<void> {
  signal?.throwIfAborted();
  return new Promise<void>((resolve, reject) => {
    const wake = (): void => {
      signal?.removeEventListener('abort', gaveUp);
      resolve();
    };
    const gaveUp = (): void => {
      const at = queue.indexOf(wake);
      if (at >= 0) queue.splice(at, 1);
      reject(signal!.reason);
    };
    queue.push(wake);
    signal?.addEventListener('abort', gaveUp, { once: true });
  });
}
