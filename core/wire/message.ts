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

/** Packs frames into one message body. */
export function packMessage(frames: readonly WireFrame[]): Uint8Array {
  const out = new Uint8Array(messageSize(frames));
  const view = new DataView(out.buffer);
  let at = 0;
  for (const frame of frames) {
    view.setUint8(at, frame.kind);
    view.setUint32(at + 1, frame.call >>> 0);
    view.setUint32(at + 5, frame.body.length);
    out.set(frame.body, at + FRAME_HEADER);
    at += FRAME_HEADER + frame.body.length;
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
