// One gdrpc connection (one UCX endpoint), either side: framing, liveness, exposures, teardown.
// The client and server add their call handling on top through a FrameHandler.
import { setMaxListeners } from 'node:events';
import type { Endpoint } from '../ucx/index.ts';
import { Code, GdrpcError } from '../errors.ts';
import { decodeFrame, encodeFrame } from '../wire/codec.ts';
import { FrameKind } from '../wire/frames.ts';
import { controlTag, dataTag, IdSequence } from '../wire/tag.ts';
import type { FrameSink } from './dispatcher.ts';
import { Exposures } from './exposures.ts';
import { Liveness } from './liveness.ts';
import { DEFAULT_INLINE_BYTES } from './movers/choose.ts';
import type { Runtime } from './runtime.ts';

/** What the side that owns a connection does with its frames. */
export interface FrameHandler {
  frame(kind: FrameKind, call: number, body: Record<string, unknown>): void;
  /** A frame that failed decoding or was too long for the receive buffer. */
  malformed(kind: number, call: number, error: GdrpcError): void;
  /** The connection is gone (closed here, peer gone, liveness); `error` says why. */
  closed(error: GdrpcError): void;
}

/** Limits and settings the peer announced in the handshake. */
export interface PeerLimits {
  maxFrame: number; maxTensor: number; inline: number;
  /** receives @cuda tensors into GPU memory */ gpu: boolean;
  /** understands BATCH frames */ batch: boolean;
  /** stages what it receives into GPU memory through host memory (its UCX cannot map CUDA) */ stages?: boolean;
}

interface QueuedFrame { kind: FrameKind; call: number; bytes: Uint8Array; resolve: () => void; reject: (error: unknown) => void }

/** Bytes before each frame inside a BATCH: kind u8, call u32, length u32 (big-endian). */
const BATCH_HEADER = 9;

function packBatch(frames: QueuedFrame[], size: number): Uint8Array {
  const out = new Uint8Array(size);
  const view = new DataView(out.buffer);
  let at = 0;
  for (const frame of frames) {
    view.setUint8(at, frame.kind);
    view.setUint32(at + 1, frame.call);
    view.setUint32(at + 5, frame.bytes.length);
    out.set(frame.bytes, at + BATCH_HEADER);
    at += BATCH_HEADER + frame.bytes.length;
  }
  return out;
}

/** A connection: frames out, frames in (via the dispatcher), liveness, exposures, close. */
export class Connection implements FrameSink {
  readonly localId: number;
  remoteId = 0;
  peerLimits: PeerLimits = { maxFrame: Number.MAX_SAFE_INTEGER, maxTensor: Number.MAX_SAFE_INTEGER, inline: 0, gpu: false, batch: false };
  /** Largest host tensor this side sends inline. */
  inlineBytes = DEFAULT_INLINE_BYTES;
  /** Largest frame this side accepts on this connection (the worker's buffer may be larger). */
  frameLimit = Number.MAX_SAFE_INTEGER;
  readonly exposures = new Exposures();
  readonly transfers = new IdSequence();
  readonly liveness: Liveness;
  readonly #abort = new AbortController();
  #error: GdrpcError | undefined;
  #handler: FrameHandler | undefined;

  constructor(readonly runtime: Runtime, readonly endpoint: Endpoint, livenessMs: number) {
    // Every receive tied to the connection listens to this signal: many at once is normal.
    setMaxListeners(0, this.#abort.signal);
    this.localId = runtime.dispatcher.register(this);
    this.liveness = new Liveness(livenessMs, () => this.#keepalive(), (silentMs) => {
      this.close(new GdrpcError(Code.UNAVAILABLE, `peer ${this.peer} silent for ${silentMs} ms (liveness ${this.liveness.timeoutMs} ms)`));
    });
    endpoint.on('error', (error) => this.close(new GdrpcError(Code.UNAVAILABLE, `connection to ${this.peer} failed: ${error.rawMessage}`, { cause: error, ucsStatus: error.ucsStatus })));
  }

  get peer(): string { return this.endpoint.peer; }
  /** Aborts when the connection closes; every wait tied to the connection listens to it. */
  get signal(): AbortSignal { return this.#abort.signal; }
  get closedError(): GdrpcError | undefined { return this.#error; }
  get isOpen(): boolean { return this.#error === undefined; }

  setHandler(handler: FrameHandler): void { this.#handler = handler; }

  /** Sends a control frame to the peer (tag carries the peer's id for this connection). */
  send(kind: FrameKind, call: number, body: Record<string, unknown>): Promise<void> {
    if (this.#error !== undefined) return Promise.reject(this.#error);
    const bytes = encodeFrame(body);
    if (bytes.length > this.peerLimits.maxFrame) {
      return Promise.reject(new GdrpcError(Code.RESOURCE_EXHAUSTED, `frame of ${bytes.length} bytes exceeds the peer's ${this.peerLimits.maxFrame}-byte frame limit`));
    }
    if (!this.peerLimits.batch) return this.sendRaw(controlTag(kind, this.remoteId, call), bytes);
    // Frames sent in the same turn of the event loop leave as one UCX message (docs/wire.md
    // BATCH): with many calls in flight that halves the messages and the wake-ups they cost.
    return new Promise<void>((resolve, reject) => {
      if (this.#queue.length === 0) queueMicrotask(() => this.#flush());
      this.#queue.push({ kind, call, bytes, resolve, reject });
    });
  }

  #queue: QueuedFrame[] = [];

  #flush(): void {
    const queue = this.#queue;
    this.#queue = [];
    let start = 0;
    while (start < queue.length) {
      // As many frames as fit in one peer frame.
      let end = start;
      let size = 0;
      while (end < queue.length && (end === start || size + BATCH_HEADER + queue[end]!.bytes.length <= this.peerLimits.maxFrame)) {
        size += BATCH_HEADER + queue[end]!.bytes.length;
        end += 1;
      }
      const group = queue.slice(start, end);
      start = end;
      const sent = group.length === 1
        ? this.sendRaw(controlTag(group[0]!.kind, this.remoteId, group[0]!.call), group[0]!.bytes)
        : this.sendRaw(controlTag(FrameKind.Batch, this.remoteId, 0), packBatch(group, size));
      sent.then(() => { for (const f of group) f.resolve(); }, (error: unknown) => { for (const f of group) f.reject(error); });
    }
  }

  /** Sends a frame whose tag and bytes the caller built (handshake, tests of malformed input). */
  sendRaw(tag: bigint, bytes: Uint8Array): Promise<void> {
    this.liveness.sent();
    const slot = this.runtime.sendSlots.take(bytes);
    const sent = this.endpoint.tagSend(tag, slot?.view ?? bytes);
    if (slot !== undefined) sent.then(slot.release, slot.release);
    return sent.catch((error: unknown) => {
      throw this.#error ?? GdrpcError.from(error, Code.UNAVAILABLE);
    });
  }

  /** Tag of tensor bytes this side sends on this connection. */
  outgoingDataTag(transfer: number): bigint { return dataTag(this.remoteId, transfer); }
  /** Tag of tensor bytes this side receives on this connection. */
  incomingDataTag(transfer: number): bigint { return dataTag(this.localId, transfer); }

  onFrame(kind: number, call: number, bytes: Uint8Array): void {
    this.liveness.received();
    if (this.#error !== undefined) return;
    if (bytes.length > this.frameLimit) {
      this.#handler?.malformed(kind, call, new GdrpcError(Code.RESOURCE_EXHAUSTED, `frame of ${bytes.length} bytes exceeds the ${this.frameLimit}-byte frame limit`));
      return;
    }
    if (kind === FrameKind.Batch) {
      this.#unbatch(call, bytes);
      return;
    }
    let body: Record<string, unknown>;
    try {
      body = decodeFrame(kind, bytes);
    } catch (error) {
      this.#handler?.malformed(kind, call, GdrpcError.from(error));
      return;
    }
    if (kind === FrameKind.Keepalive) return;
    if (kind === FrameKind.Fin) {
      this.exposures.release(body.x as number);
      return;
    }
    this.#handler?.frame(kind, call, body);
  }

  /** Splits a BATCH into its frames and handles them in order; a malformed batch is dropped whole. */
  #unbatch(call: number, bytes: Uint8Array): void {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const frames: Array<[number, number, Uint8Array]> = [];
    for (let at = 0; at < bytes.length;) {
      if (at + BATCH_HEADER > bytes.length) return this.#handler?.malformed(FrameKind.Batch, call, new GdrpcError(Code.INVALID_ARGUMENT, 'malformed frame: truncated BATCH'));
      const kind = view.getUint8(at);
      const frameCall = view.getUint32(at + 1);
      const length = view.getUint32(at + 5);
      at += BATCH_HEADER;
      if (kind === FrameKind.Batch || at + length > bytes.length) {
        return this.#handler?.malformed(FrameKind.Batch, call, new GdrpcError(Code.INVALID_ARGUMENT, 'malformed frame: bad BATCH entry'));
      }
      frames.push([kind, frameCall, bytes.subarray(at, at + length)]);
      at += length;
    }
    for (const [kind, frameCall, frame] of frames) this.onFrame(kind, frameCall, frame);
  }

  onOversized(kind: number, call: number, length: number): void {
    this.liveness.received();
    const error = new GdrpcError(Code.RESOURCE_EXHAUSTED, `frame of ${length} bytes exceeds the ${this.runtime.dispatcher.frameBytes}-byte frame limit`);
    this.#handler?.malformed(kind, call, error);
  }

  /** Closes the connection (idempotent): releases exposures, stops liveness, closes the endpoint
   *  (force when the peer is gone) and tells the handler. */
  close(error: GdrpcError = new GdrpcError(Code.UNAVAILABLE, 'connection closed'), options: { graceful?: boolean } = {}): void {
    if (this.#error !== undefined) return;
    this.#error = error;
    this.liveness.stop();
    this.exposures.releaseAll();
    this.runtime.dispatcher.unregister(this.localId);
    this.#abort.abort(error);
    const force = !options.graceful || this.endpoint.failed;
    void this.endpoint.close({ force }).catch(() => { /* already failed: nothing left to release */ });
    this.#handler?.closed(error);
  }

  #keepalive(): void {
    if (this.remoteId === 0) return;
    this.send(FrameKind.Keepalive, 0, {}).catch(() => { /* the liveness timer or error event reports it */ });
  }
}
