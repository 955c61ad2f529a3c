// A connection's message window (docs/wire.md "Message window"). UCX reads every eager message a
// peer sends into its unexpected queue, whether or not anyone is reading: a peer that sends faster
// than this side reads (messages that are costly to decode) grows that queue without end (a flood
// of 256 KiB messages took a server to 15 GB in 20 s). How far behind the reader is cannot be seen
// from here, since the queue is UCX's. So the peer must show it: it may send `size` bytes of
// messages, plus what the credits it acknowledged gave back. Each credit carries an id drawn at
// random, which the peer can only learn by receiving the credit, and it echoes that id (ACK)
// before sending the bytes the credit gave: a peer that runs ahead of its credits has nothing to
// echo, and is found out, before any of its messages past the window is decoded, once the reader
// reaches them. The window's own frames travel in messages of their own that are not counted, so
// that two sides whose windows are both shut can still give each other credit.
import { getRandomValues } from 'node:crypto';
import { Code, GdrpcError } from '../../errors.ts';
import { FrameKind } from '../../wire/frames.ts';
import { FRAME_HEADER, u32 } from '../../wire/message.ts';

/** Smallest window a peer may announce (the handshake is refused below it). */
export const MIN_WINDOW_BYTES = 64 * 1024;
/** Largest window a peer may announce, and a side's own at most (a server's maxFrameBytes of up to
 *  half of it: WINDOW_MESSAGES). The peer's window is what this side hands to UCX for it before
 *  waiting for credit: a peer that announced 2^31 bytes, or none, and stopped reading its socket
 *  had a server hold about 37 MiB for it (in UCX's send queue) by the time liveness closed it,
 *  1.3 GB for 32 such peers (a helper session's attack, 2026-12-06). Now what waits in that queue
 *  is counted across the runtime too (maxWaitingBytes). */
export const MAX_WINDOW_BYTES = 256 << 20;

/** Why an announced window (HELLO's or AUTH's `win`) is refused: it is required, and bounded. */
export function windowRefusal(win: number | undefined): string | undefined {
  if (win === undefined) return 'no message window (`win`: every gdrpc peer announces one; docs/wire.md "Message window")';
  if (win < MIN_WINDOW_BYTES || win > MAX_WINDOW_BYTES) return `a message window of ${win} bytes (from ${MIN_WINDOW_BYTES} to ${MAX_WINDOW_BYTES})`;
  return undefined;
}
/** Smallest credit a peer may give: a quarter of the smallest window. Credits are bounded by what
 *  this side sent, so this bounds how many uncounted messages of credits a peer can send. */
export const MIN_CREDIT_BYTES = MIN_WINDOW_BYTES / 4;
/** What a frame weighs in the window besides its bytes: reading a frame costs far more than
 *  reading a byte (a refused REQUEST is answered, a malformed frame reported), and a window of
 *  bytes alone let a peer flooding 126-byte messages of 14 frames run so far ahead before it was
 *  found out that UCX's queue took 5 GB (a helper session's attack, 2026-12-06). */
export const FRAME_WEIGHT_BYTES = 1024;
/** Longest message of window frames alone that is left uncounted (gdrpc's take about 30 bytes). */
export const MAX_WINDOW_MESSAGE_BYTES = 128;
/** Random ids drawn at once (a credit is given per quarter window, megabytes apart). */
const ID_BATCH = 64;

/** A credit: `n` bytes, acknowledged by echoing `id`. */
export interface Credit { n: number; id: number }

/** The receiving half's count: what the peer sent, what it may send, the credits given. */
export class ReceiveWindow {
  #received = 0;
  #acked = 0;
  #unread = 0;
  readonly #given: Credit[] = [];
  readonly #ids = new Uint32Array(ID_BATCH);
  #nextId = ID_BATCH;

  /** `size`: the window this side announced (HELLO's or AUTH's `win`); `before`: the bytes the
   *  peer may send before admission. */
  constructor(readonly size: number, private readonly before: number) {}

  /** Bytes received so far. */
  get received(): number { return this.#received; }
  /** Bytes the peer may have sent by now. */
  limit(admitted: boolean): number {
    return admitted ? this.size + this.#acked : Math.min(this.before, this.size);
  }

  /** Counts a message of `length` bytes before it is read: false when it ran past the limit. */
  arrived(length: number, admitted: boolean): boolean {
    this.#received += length;
    return this.#received <= this.limit(admitted);
  }

  /** A message of `length` bytes was read: a credit to give once a quarter of the window was. */
  read(length: number): Credit | undefined {
    this.#unread += length;
    if (this.#unread < this.size / 4) return undefined;
    const credit = { n: this.#unread, id: this.#drawId() };
    this.#unread = 0;
    this.#given.push(credit);
    return credit;
  }

  /** The peer echoed credit `id`: it must be the oldest not yet acknowledged. */
  ack(id: number): boolean {
    const oldest = this.#given[0];
    if (oldest === undefined || oldest.id !== id) return false;
    this.#given.shift();
    this.#acked += oldest.n;
    return true;
  }

  #drawId(): number {
    if (this.#nextId === ID_BATCH) {
      getRandomValues(this.#ids);
      this.#nextId = 0;
    }
    // 30 bits: a small integer to V8 (a uint32 past 2^30 is a heap number, and the first credit
    // deoptimized the message path it is made on); a guess is still one in 2^30, and a wrong ACK
    // closes the connection.
    return this.#ids[this.#nextId++]! & 0x3fff_ffff;
  }
}

/** What the window needs of its connection. */
export interface WindowLink {
  readonly peer: string;
  readonly admitted: boolean;
  /** The peer broke the window's rules: report it and close the connection now. */
  refuse(error: GdrpcError): void;
  /** Sends a window frame at once, in a message of its own that the peer does not count. */
  sendWindowFrame(kind: FrameKind.Credit | FrameKind.Ack, body: { n: number; id: number } | { id: number }): void;
  /** Bytes of the (counted) messages this side has sent so far. */
  sentBytes(): number;
  /** The peer gave `n` bytes of this side's window back: waiting messages may go. */
  grant(n: number): void;
}

/** Both halves of a connection's window, on the connection's behalf. */
export class MessageWindow {
  readonly #receive: ReceiveWindow;
  /** The peer ran past its window: nothing more from it is read. */
  #overrun = false;
  /** Bytes of this side's messages the peer credited back so far. */
  #credited = 0;

  constructor(readonly size: number, before: number, private readonly link: WindowLink) {
    this.#receive = new ReceiveWindow(size, before);
  }

  get overrun(): boolean { return this.#overrun; }

  /** Counts a message of `length` bytes against the peer's window before it is read; false, and
   *  the connection refused, when the peer ran past it. */
  arrived(length: number): boolean {
    if (this.#overrun) return false;
    const { admitted } = this.link;
    if (this.#receive.arrived(length, admitted)) return true;
    this.#overrun = true;
    const limit = this.#receive.limit(admitted);
    this.link.refuse(new GdrpcError(Code.RESOURCE_EXHAUSTED, `${this.link.peer} sent ${this.#receive.received - limit} bytes of messages past its window ` +
      `(${admitted ? `${this.size} bytes and the credits it acknowledged` : `${limit} bytes before admission`}; docs/wire.md "Message window")`));
    return false;
  }

  /** A counted message of `length` bytes was read: once a quarter of the window was, a CREDIT on
   *  call 0 gives it back. */
  read(length: number): void {
    if (!this.link.admitted || this.#overrun) return;
    // Credits not yet acknowledged number four or so at most: without ACKs the peer may send one
    // window, which earns four credits.
    const credit = this.#receive.read(length);
    if (credit !== undefined) this.link.sendWindowFrame(FrameKind.Credit, credit);
  }

  /** The peer's CREDIT on call 0: acknowledged at once, ahead of the messages that use it; an
   *  error for a credit no reader could have given (too small, or more than this side sent). */
  credit(n: number, id: number | undefined): GdrpcError | undefined {
    if (id === undefined) return new GdrpcError(Code.INVALID_ARGUMENT, 'a CREDIT on call 0 without an id');
    if (n < MIN_CREDIT_BYTES || this.#credited + n > this.link.sentBytes()) {
      return new GdrpcError(Code.INVALID_ARGUMENT, `a CREDIT of ${n} bytes, with ${this.#credited} credited before, for ${this.link.sentBytes()} bytes sent (at least ${MIN_CREDIT_BYTES} a credit)`);
    }
    this.#credited += n;
    this.link.sendWindowFrame(FrameKind.Ack, { id });
    this.link.grant(n);
    return undefined;
  }

  /** The peer's ACK: it must echo the oldest credit not yet acknowledged. */
  ack(id: number): GdrpcError | undefined {
    if (this.#receive.ack(id)) return undefined;
    return new GdrpcError(Code.INVALID_ARGUMENT, `an ACK of credit ${id}, which is not the oldest this side gave`);
  }
}

/** What the message `source[0, length)` weighs in the window: its bytes and FRAME_WEIGHT_BYTES a
 *  frame, from its frame headers alone (a header cut short counts as a frame). */
export function messageWeight(source: Uint8Array, length: number): number {
  let frames = 0;
  for (let at = 0; at < length; frames += 1) {
    if (at + FRAME_HEADER > length) return length + (frames + 1) * FRAME_WEIGHT_BYTES;
    at += FRAME_HEADER + u32(source, at + 5);
  }
  return length + Math.max(frames, 1) * FRAME_WEIGHT_BYTES;
}

/** The body of a window frame ({v: 2, n, id} for CREDIT, {v: 2, id} for ACK) written out by hand:
 *  through msgpackr, the first credit's new object shapes deoptimized its encoder for every
 *  frame (the GPU bench's small call, timed over its first 5,000 calls, took 5 µs more). Checked
 *  against the frame table by decoding (test/rpc/message-window.test.ts). */
export function windowFrameBody(body: { n: number; id: number } | { id: number }): Uint8Array {
  const withN = 'n' in body;
  const out = new Uint8Array(32);
  let at = 0;
  out[at++] = 0x80 | (withN ? 3 : 2);  // fixmap
  out[at++] = 0xa1; out[at++] = 0x76; out[at++] = 2;  // 'v': 2
  if (withN) {
    out[at++] = 0xa1; out[at++] = 0x6e;  // 'n'
    at = putUint(out, at, body.n);
  }
  out[at++] = 0xa2; out[at++] = 0x69; out[at++] = 0x64;  // 'id'
  at = putUint(out, at, body.id);
  return out.subarray(0, at);
}

/** A msgpack uint32, or a float64 past it (as msgpackr writes integers up to 2^53). */
function putUint(out: Uint8Array, at: number, value: number): number {
  if (value < 2 ** 32) {
    out[at] = 0xce;
    new DataView(out.buffer, out.byteOffset).setUint32(at + 1, value);
    return at + 5;
  }
  out[at] = 0xcb;
  new DataView(out.buffer, out.byteOffset).setFloat64(at + 1, value);
  return at + 9;
}

/** Whether `source[0, length)` is a message of window frames alone (CREDIT on call 0, ACK), which
 *  the peer sends outside its window. Reads frame headers only; the caller bounds `length`. */
export function onlyWindowFrames(source: Uint8Array, length: number): boolean {
  let at = 0;
  while (at < length) {
    if (at + FRAME_HEADER > length) return false;
    const kind = source[at]!;
    if ((kind !== FrameKind.Ack && kind !== FrameKind.Credit) || u32(source, at + 1) !== 0) return false;
    at += FRAME_HEADER + u32(source, at + 5);
  }
  return at === length && length > 0;
}
