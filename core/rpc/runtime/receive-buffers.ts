// Where the dispatcher's control receives land: the receive buffer (a connection's messages, up to
// the frame size), a small one for messages under a HELLO key, and the slot the binding writes a
// received message's sender tag and length into. A receive that does not complete at once keeps
// its buffer and slot until UCX completes it, and the next receive gets new ones. Under a HELLO key
// such a receive is left to UCX (#leave) rather than waited for: a server's HELLO is one small
// message, sent eager unless its UCX was told otherwise, and a peer able to send to this process
// that sent rendezvous messages under a connection's HELLO key and held their bytes back held that
// connection's HELLO a second a message, the connection failing at the first
// (test/security/partial-message.test.ts).
import { ReceiveBuffer } from './receive-buffer.ts';

/** Longest message taken under a HELLO key (a gdrpc server's HELLO is about 200 bytes): one longer
 *  is not a HELLO, and is dropped unread while its handshake goes on waiting. */
export const MAX_HELLO_BYTES = 4096;
/** Receives under one HELLO key left to UCX before its handshake fails, and under all of them
 *  together before any handshake that has one more does: each keeps a MAX_HELLO_BYTES buffer until
 *  UCX completes or cancels it (when the endpoint its message came on closes). */
export const MAX_LEFT_PER_HELLO = 32;
export const MAX_LEFT_HELLO_RECEIVES = 1024;

export type Slot = Uint32Array;

/** What a receive left to UCX counts against: its handshake's entry (its receives left open). */
export interface LeftCounter { left?: number }

export class ReceiveBuffers {
  #frames: ReceiveBuffer;
  #hello = new ReceiveBuffer(MAX_HELLO_BYTES);
  #slot: Slot = new Uint32Array(4);
  /** Receives under a HELLO key left to UCX: their buffers, slots and handshakes' entries. */
  readonly #left = new Map<ReceiveBuffer, { slot: Slot; entry: LeftCounter }>();
  /** Receives ever left (stats). */
  leftCount = 0;

  constructor(frameBytes: number) { this.#frames = new ReceiveBuffer(frameBytes); }

  /** Largest control message a connection's receive takes. */
  get frameBytes(): number { return this.#frames.bytes.length; }

  /** Grows the frame buffer to at least `bytes` (from the next receive on). */
  ensureFrameBytes(bytes: number): void {
    if (bytes > this.#frames.bytes.length) this.#frames = new ReceiveBuffer(bytes);
  }

  /** The buffer the next message under a HELLO key (`hello`) or a connection's key lands in. */
  buffer(hello: boolean): ReceiveBuffer { return hello ? this.#hello : this.#frames; }

  /** The slot the next receive's sender tag and length are written into. */
  get slot(): Slot { return this.#slot; }

  /** The receive into `buffer` (and the current slot) waits for the rest of its message: both stay
   *  with it, and the next receive gets new ones. */
  keep(buffer: ReceiveBuffer): void {
    if (buffer === this.#hello) this.#hello = new ReceiveBuffer(MAX_HELLO_BYTES);
    else this.#frames = new ReceiveBuffer(buffer.bytes.length);
    this.#slot = new Uint32Array(4);
  }

  /** Leaves the receive into the HELLO buffer `buffer` (and the current slot) to UCX, counted
   *  against `entry`. False when that passes MAX_LEFT_PER_HELLO open for the entry, or
   *  MAX_LEFT_HELLO_RECEIVES open across the worker: its handshake is to be refused. */
  leave(buffer: ReceiveBuffer, entry: LeftCounter): boolean {
    this.#left.set(buffer, { slot: this.#slot, entry });
    this.leftCount += 1;
    entry.left = (entry.left ?? 0) + 1;
    this.keep(buffer);
    return entry.left <= MAX_LEFT_PER_HELLO && this.#left.size <= MAX_LEFT_HELLO_RECEIVES;
  }

  /** A receive into `buffer` completed: its slot if it was one left to UCX (no longer kept, nor
   *  counted against its entry). */
  takeLeft(buffer: ReceiveBuffer): Slot | undefined {
    const left = this.#left.get(buffer);
    if (left === undefined) return undefined;
    this.#left.delete(buffer);
    if (left.entry.left !== undefined && left.entry.left > 0) left.entry.left -= 1;
    return left.slot;
  }

  /** Receives left to UCX that it has not completed. */
  get leftOpen(): number { return this.#left.size; }

  /** Forgets the receives left (the dispatcher stopped: the worker's close ends them, untold). */
  forgetLeft(): void { this.#left.clear(); }
}
