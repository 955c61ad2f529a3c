// A control message: one or more frames, each `kind u8 ‖ call u32be ‖ length u32be ‖ body`
// (docs/wire.md "Control messages"). The tag only names the connection (tag.ts), so kind and call
// id travel here; frames sent in one turn of the event loop share a message.
import { Code, GdrpcError } from '../errors.ts';

/** Bytes before each frame body: kind u8, call u32, length u32 (big-endian). */
export const FRAME_HEADER = 9;

/** One frame of a control message; `body` is the msgpack map (codec.ts). */
export interface WireFrame { kind: number; call: number; body: Uint8Array }

/** Bytes `frames` take in one message. */
export function messageSize(frames: readonly WireFrame[]): number {
  let size = 0;
  for (const frame of frames) size += FRAME_HEADER + frame.body.length;
  return size;
}

/** Packs frames into one message body. The header words are written byte by byte: a DataView
 *  of a fresh small array moves V8's on-heap bytes to a buffer of their own first, which cost
 *  more than the rest of packing a control message. */
export function packMessage(frames: readonly WireFrame[]): Uint8Array {
  const out = new Uint8Array(messageSize(frames));
  let at = 0;
  for (const frame of frames) {
    const call = frame.call >>> 0;
    const length = frame.body.length;
    out[at] = frame.kind;
    out[at + 1] = call >>> 24;
    out[at + 2] = call >>> 16;
    out[at + 3] = call >>> 8;
    out[at + 4] = call;
    out[at + 5] = length >>> 24;
    out[at + 6] = length >>> 16;
    out[at + 7] = length >>> 8;
    out[at + 8] = length;
    out.set(frame.body, at + FRAME_HEADER);
    at += FRAME_HEADER + length;
  }
  return out;
}

/** Splits a message into its frames (views into `bytes`); INVALID_ARGUMENT when an entry is cut
 *  short or the message is empty: then none of its frames is used. */
export function unpackMessage(bytes: Uint8Array): WireFrame[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const frames: WireFrame[] = [];
  for (let at = 0; at < bytes.length;) {
    if (at + FRAME_HEADER > bytes.length) throw malformed('a frame header runs past the end of the message');
    const kind = view.getUint8(at);
    const call = view.getUint32(at + 1);
    const length = view.getUint32(at + 5);
    at += FRAME_HEADER;
    if (at + length > bytes.length) throw malformed(`a frame of ${length} bytes runs past the end of the message`);
    frames.push({ kind, call, body: bytes.subarray(at, at + length) });
    at += length;
  }
  if (frames.length === 0) throw malformed('empty control message');
  return frames;
}

function malformed(message: string): GdrpcError {
  return new GdrpcError(Code.INVALID_ARGUMENT, `malformed message: ${message}`);
}
