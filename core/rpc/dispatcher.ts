// One posted control receive per worker, routed by the tag's connection id. UCX does not say which
// endpoint a tag message came from, so the receiving side's connection id in the tag is what ties
// a frame to its connection (docs/wire.md). One receive at a time keeps each connection's frames
// in the order they were sent; messages that arrive meanwhile wait in UCX's unexpected queue.
import type { Worker } from '../ucx/index.ts';
import { Code, GdrpcError } from '../errors.ts';
import { CONTROL_MASK, MAX_CONNECTION_ID, parseTag } from '../wire/tag.ts';
import { FrameKind } from '../wire/frames.ts';

/** What a connection exposes to the dispatcher. */
export interface FrameSink {
  /** A control frame for this connection; `bytes` is a private copy. */
  onFrame(kind: number, call: number, bytes: Uint8Array): void;
  /** A frame that was longer than the receive buffer (truncated by UCX). */
  onOversized(kind: number, call: number, length: number): void;
}

/** Routes control frames of one worker to its connections. */
export class Dispatcher {
  readonly #sinks = new Map<number, FrameSink>();
  #nextId = 1;
  #hello: FrameSink | undefined;
  #helloQueue: Array<() => void> = [];
  #buffer: Buffer;
  #stop = new AbortController();
  #running = false;

  constructor(private readonly worker: Worker, frameBytes: number) {
    this.#buffer = Buffer.allocUnsafe(frameBytes);
  }

  /** Grows the receive buffer to at least `bytes` (from the next receive on). */
  ensureFrameBytes(bytes: number): void {
    if (bytes > this.#buffer.length) this.#buffer = Buffer.allocUnsafe(bytes);
  }

  /** Largest frame this worker can receive. */
  get frameBytes(): number { return this.#buffer.length; }

  /** Assigns a connection id to `sink`; frames tagged with it go there. */
  register(sink: FrameSink): number {
    for (let tries = 0; tries < MAX_CONNECTION_ID; tries += 1) {
      const id = this.#nextId;
      this.#nextId = id >= MAX_CONNECTION_ID ? 1 : id + 1;
      if (!this.#sinks.has(id)) {
        this.#sinks.set(id, sink);
        this.#start();
        return id;
      }
    }
    throw new GdrpcError(Code.RESOURCE_EXHAUSTED, 'no free connection id on this worker');
  }

  unregister(id: number): void {
    this.#sinks.delete(id);
  }

  /** Routes the next HELLO (connection id 0) to `sink`. Outgoing handshakes take turns (wire.md):
   *  the returned function ends this one's turn. */
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

  /** Stops receiving (the worker is about to close). */
  stop(): void {
    this.#stop.abort();
  }

  #start(): void {
    if (this.#running || this.#stop.signal.aborted) return;
    this.#running = true;
    void this.#loop();
  }

  async #loop(): Promise<void> {
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      try {
        const buffer = this.#buffer;
        const { senderTag, length } = await this.worker.tagRecv(buffer, CONTROL_MASK, CONTROL_MASK, { signal });
        this.#route(senderTag, Buffer.from(buffer.subarray(0, length)));
      } catch (error) {
        if (signal.aborted) break;
        this.#onReceiveError(GdrpcError.from(error));
      }
    }
    this.#running = false;
  }

  #route(tag: bigint, bytes: Uint8Array): void {
    const { kind, connection, id } = parseTag(tag);
    const sink = connection === 0 && kind === FrameKind.Hello ? this.#hello : this.#sinks.get(connection);
    // A frame for a connection that is gone (or never was) has nobody to answer it: drop it.
    sink?.onFrame(kind, id, bytes);
  }

  #onReceiveError(error: GdrpcError): void {
    const tag = error.details?.senderTag;
    if (/truncat/i.test(error.rawMessage) && typeof tag === 'bigint') {
      const { kind, connection, id } = parseTag(tag);
      const length = typeof error.details?.length === 'number' ? error.details.length : -1;
      this.#sinks.get(connection)?.onOversized(kind, id, length);
    }
    // Without the tag there is no one to tell; the frame is lost and the loop goes on.
  }
}
