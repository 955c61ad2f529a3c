// A connection's control messages on their way in: each counted against the message window
// (window.ts) before it is read, then split into frames, each checked against the frame table and
// handled here (the window's frames, FIN, SENT, REPORTS, KEEPALIVE) or handed to the side that owns
// the connection (FrameHandler). Frames that fail their checks are answered one by one, up to a cap
// per message and per connection, past which the peer is refused as a whole.
import { Code, GdrpcError } from '../../errors.ts';
import { decodeFrame } from '../../wire/codec.ts';
import { FrameKind, type Frame } from '../../wire/frames.ts';
import { unpackMessage, type ReceivedFrame } from '../../wire/message.ts';
import type { Exposures } from './exposures.ts';
import { MAX_REPORTS_PER_MESSAGE, type TransferReports } from './reports.ts';
import { FRAME_WEIGHT_BYTES, MAX_WINDOW_MESSAGE_BYTES, messageWeight, onlyWindowFrames } from './window-frames.ts';
import type { MessageWindow } from './window.ts';

/** What the side that owns a connection does with its frames. */
export interface FrameHandler {
  /** A well-formed frame (checked against the frame table), other than KEEPALIVE, FIN, SENT,
   *  REPORTS and CREDIT on call 0.
   *  An error returned says the frame is of no use here (a kind this side never receives): it is
   *  reported through malformed() and counts towards MAX_MALFORMED_FRAMES like a frame that
   *  failed its checks. */
  frame(frame: Frame): GdrpcError | void;
  /** A frame that failed decoding or was too long for the receive buffer. */
  malformed(kind: number, call: number, error: GdrpcError): void;
  /** The connection is gone (closed here, peer gone, liveness); `error` says why. */
  closed(error: GdrpcError): void;
}

/** Longest control message read before admission: the handshake's frames (HELLO, AUTH, READY)
 *  take a few hundred bytes. Without it one AUTH carrying a map of 300,000 keys (3.6 MB) held a
 *  server's event loop 78-99 ms to decode, before any token was checked, once per connection. */
export const MAX_HANDSHAKE_MESSAGE_BYTES = 16 * 1024;
/** Malformed frames one message may carry, each answered on its own (an ERROR for its call);
 *  past that the connection is refused as a whole: a peer's one message cannot make this side
 *  send an ERROR, and raise an 'error' event, for each of thousands of tiny frames. */
export const MAX_MALFORMED_FRAMES = 16;
/** Malformed frames a connection may send in all, each answered on its own: past it the
 *  connection is refused. A gdrpc peer sends none; a peer that sent 14 to a 126-byte message made
 *  the server answer each with an ERROR and an 'error' event, at about 40 µs a frame, while UCX
 *  queued its flood (a helper session's attack, 2026-12-06). */
export const MAX_MALFORMED_PER_CONNECTION = 256;

/** What the reader needs of its connection. */
export interface InboundLink {
  readonly peer: string;
  /** Admission is complete: before it only handshake frames count. */
  readonly admitted: boolean;
  /** Not closed: nothing is read once it is. */
  readonly isOpen: boolean;
  /** Largest message this side processes on the connection. */
  readonly frameLimit: number;
  readonly handler: FrameHandler | undefined;
  readonly exposures: Exposures;
  readonly reports: TransferReports;
}

/** Reads one connection's control messages (connection.ts hands them over). */
export class Inbound {
  /** Malformed frames the peer sent so far, answered one by one (MAX_MALFORMED_PER_CONNECTION). */
  #malformedFrames = 0;
  /** Reports the REPORTS frames of the message being read carried so far. */
  #reportsInMessage = 0;

  constructor(private readonly link: InboundLink, private readonly window: MessageWindow) {}

  /** A control message of `length` bytes in `source`: counted, then read frame by frame. */
  message(source: Uint8Array, length: number): void {
    const link = this.link;
    if (!link.isOpen || this.window.overrun) return;
    if (link.admitted && length <= MAX_WINDOW_MESSAGE_BYTES && onlyWindowFrames(source, length)) {
      this.#readMessage(source, length);  // the window's own: not counted against it
      return;
    }
    const weight = messageWeight(source, length);
    if (!this.window.arrived(weight)) return;
    try {
      this.#readMessage(source, length);
    } finally {
      if (link.isOpen) this.window.read(weight);
    }
  }

  #readMessage(source: Uint8Array, length: number): void {
    const link = this.link;
    if (!link.admitted && length > MAX_HANDSHAKE_MESSAGE_BYTES) {
      link.handler?.malformed(0, 0, new GdrpcError(Code.INVALID_ARGUMENT, `${link.peer} sent a message of ${length} bytes before admission; the handshake's are under ${MAX_HANDSHAKE_MESSAGE_BYTES}`));
      return;
    }
    let frames: ReceivedFrame[];
    try {
      frames = unpackMessage(source, length);
    } catch (error) {
      link.handler?.malformed(0, 0, GdrpcError.from(error));
      return;
    }
    if (length > link.frameLimit) {
      // Too long to be processed, but its frame headers still say which calls to fail.
      const error = new GdrpcError(Code.RESOURCE_EXHAUSTED, `message of ${length} bytes exceeds the ${link.frameLimit}-byte frame limit`);
      if (frames.length > MAX_MALFORMED_FRAMES) return this.#tooManyMalformed(error);
      for (const frame of frames) if (link.isOpen) link.handler?.malformed(frame.kind, frame.call, error);
      return;
    }
    let malformed = 0;
    this.#reportsInMessage = 0;
    for (const frame of frames) {
      if (!link.isOpen) return;
      const error = this.#onFrame(frame);
      if (error === undefined) continue;
      malformed += 1;
      this.#malformedFrames += 1;
      if (malformed > MAX_MALFORMED_FRAMES) return this.#tooManyMalformed();
      if (this.#malformedFrames > MAX_MALFORMED_PER_CONNECTION) {
        link.handler?.malformed(0, 0, new GdrpcError(Code.INVALID_ARGUMENT, `${link.peer} sent more than ${MAX_MALFORMED_PER_CONNECTION} malformed frames`));
        return;
      }
      link.handler?.malformed(frame.kind, frame.call, error);
    }
  }

  /** A message whose malformed frames would each cost an ERROR (and an 'error' event): the
   *  connection is refused as a whole instead (the handler closes it), and the rest is not read. */
  #tooManyMalformed(cause?: GdrpcError): void {
    const what = cause === undefined ? 'malformed frames' : `frames in a message over the frame limit (${cause.rawMessage})`;
    this.link.handler?.malformed(0, 0, new GdrpcError(Code.INVALID_ARGUMENT, `${this.link.peer} sent more than ${MAX_MALFORMED_FRAMES} ${what} in one message`, cause === undefined ? {} : { cause }));
  }

  /** Handles one frame; returns the error of a frame that failed its checks (not yet reported). */
  #onFrame(wire: ReceivedFrame): GdrpcError | undefined {
    const link = this.link;
    let frame: Frame;
    try {
      frame = decodeFrame(wire);
    } catch (error) {
      return GdrpcError.from(error);
    }
    if (frame.kind === FrameKind.Keepalive) return undefined;
    if (frame.kind === FrameKind.Credit && frame.call === 0) return link.admitted ? this.window.credit(frame.body.n, frame.body.id, frame.body.loan) : undefined;
    if (frame.kind === FrameKind.Ack || frame.kind === FrameKind.Want) {
      if (frame.call !== 0) return new GdrpcError(Code.INVALID_ARGUMENT, `${frame.kind === FrameKind.Ack ? 'an ACK' : 'a WANT'} on a call (the window is the connection's: call 0)`);
      if (!link.admitted) return undefined;
      return frame.kind === FrameKind.Ack ? this.window.ack(frame.body.id, frame.body.no) : this.window.want(frame.body.n);
    }
    if (frame.kind === FrameKind.Fin) {
      if (link.admitted) link.exposures.release(frame.body.x);
      return undefined;
    }
    if (frame.kind === FrameKind.Sent) {
      if (link.admitted) link.reports.deliver(frame.body.x, frame.body.p);
      return undefined;
    }
    if (frame.kind === FrameKind.Reports) {
      if (!link.admitted) return undefined;
      this.#reportsInMessage += frame.body.x.length;
      if (this.#reportsInMessage > MAX_REPORTS_PER_MESSAGE) {
        return new GdrpcError(Code.INVALID_ARGUMENT, `REPORTS frames carry more than ${MAX_REPORTS_PER_MESSAGE} reports in one message`);
      }
      const bad = link.reports.deliverAll(frame.body);
      return bad === undefined ? undefined : new GdrpcError(Code.INVALID_ARGUMENT, `REPORTS frame ${bad}`);
    }
    return link.handler?.frame(frame) ?? undefined;
  }

  /** A message longer than the receive buffer (`frameBytes`): UCX truncated it, its bytes are
   *  lost, and it weighs as one frame. */
  oversized(length: number, frameBytes: number): void {
    const weight = length + FRAME_WEIGHT_BYTES;
    if (!this.link.isOpen || !this.window.arrived(weight)) return;
    this.window.read(weight);
    const error = new GdrpcError(Code.RESOURCE_EXHAUSTED, `message of ${length} bytes exceeds the ${frameBytes}-byte frame limit`);
    this.link.handler?.malformed(0, 0, error);
  }
}
