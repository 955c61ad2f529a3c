// What the message window weighs and what its own frames look like (docs/wire.md "Message
// window"): a message's weight from its frame headers, the CREDIT, ACK and WANT bodies written by
// hand, and how a message of window frames alone (sent outside the window) is told apart. The
// window's counts are in window.ts.
import { FrameKind } from '../../wire/frames.ts';
import { FRAME_HEADER, u32 } from '../../wire/message.ts';

/** What a frame weighs in the window besides its bytes: reading a frame costs far more than
 *  reading a byte (a refused REQUEST is answered, a malformed frame reported), and a window of
 *  bytes alone let a peer flooding 126-byte messages of 14 frames run so far ahead before it was
 *  found out that UCX's queue took 5 GB (a helper session's attack, 2026-12-06). */
export const FRAME_WEIGHT_BYTES = 1024;
/** Longest message of window frames alone that is left uncounted (gdrpc's take about 30 bytes). */
export const MAX_WINDOW_MESSAGE_BYTES = 128;
/** Kinds of frames a window sends in messages of their own. */
export type WindowFrameKind = FrameKind.Credit | FrameKind.Ack | FrameKind.Want;
/** Bodies of the window's frames (the encoder writes them by hand: windowFrameBody). */
export type WindowFrameBody = { n: number; id: number; loan?: true } | { id: number; no?: true } | { n: number };

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

/** The body of a window frame ({v: 2, n, id, loan?} for CREDIT, {v: 2, id, no?} for ACK, {v: 2, n}
 *  for WANT) written out by hand: through msgpackr, the first credit's new object shapes
 *  deoptimized its encoder for every frame (the GPU bench's small call, timed over its first 5,000
 *  calls, took 5 µs more). Checked against the frame table by decoding
 *  (test/rpc/message-window.test.ts). */
export function windowFrameBody(body: WindowFrameBody): Uint8Array {
  const n = 'n' in body ? body.n : undefined;
  const id = 'id' in body ? body.id : undefined;
  const flag = 'loan' in body && body.loan === true ? 'loan' : 'no' in body && body.no === true ? 'no' : undefined;
  const out = new Uint8Array(40);
  let at = 0;
  out[at++] = 0x80 | (1 + (n === undefined ? 0 : 1) + (id === undefined ? 0 : 1) + (flag === undefined ? 0 : 1));  // fixmap
  out[at++] = 0xa1; out[at++] = 0x76; out[at++] = 2;  // 'v': 2
  if (n !== undefined) {
    out[at++] = 0xa1; out[at++] = 0x6e;  // 'n'
    at = putUint(out, at, n);
  }
  if (id !== undefined) {
    out[at++] = 0xa2; out[at++] = 0x69; out[at++] = 0x64;  // 'id'
    at = putUint(out, at, id);
  }
  if (flag !== undefined) {
    out[at++] = 0xa0 | flag.length;
    for (let i = 0; i < flag.length; i += 1) out[at++] = flag.charCodeAt(i);
    out[at++] = 0xc3;  // true
  }
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

/** Whether `source[0, length)` is a message of window frames alone (CREDIT on call 0, ACK, WANT), which
 *  the peer sends outside its window. Reads frame headers only; the caller bounds `length`. */
export function onlyWindowFrames(source: Uint8Array, length: number): boolean {
  let at = 0;
  while (at < length) {
    if (at + FRAME_HEADER > length) return false;
    const kind = source[at]!;
    if ((kind !== FrameKind.Ack && kind !== FrameKind.Credit && kind !== FrameKind.Want) || u32(source, at + 1) !== 0) return false;
    at += FRAME_HEADER + u32(source, at + 5);
  }
  return at === length && length > 0;
}
