// A control message: one or more frames, each `kind u8 ‖ call u32be ‖ length u32be ‖ body`
// (docs/wire.md "Control messages"). The tag only names the connection (tag.ts), so kind and call
// id travel here; frames sent in one turn of the event loop share a message.
import { Code, GdrpcError } from '../errors.ts';

/** Bytes before each frame body: kind u8, call u32, length u32 (big-endian). */
export const FRAME_HEADER = 9;

/** Most frames one message may carry. gdrpc sends at most 16 (outbox.ts BATCH_FRAMES); a message
 *  of more is malformed. A message's frames are read in one turn of the event loop, so without a
 *  cap one message of 4 MiB could carry 167,000-280,000 frames that need no answer and hold the
 *  receiver's loop 113-198 ms (docs/security.md "Work per frame"). */
export const MAX_MESSAGE_FRAMES = 256;

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
    putU32(out, at + 1, call);
    putU32(out, at + 5, length);
    out.set(frame.body, at + FRAME_HEADER);
    at += FRAME_HEADER + length;
  }
  return out;
}

/** A frame as it arrived: its body is `source[start, end)`, bytes of the message it came in, read
 *  in place (not copied; decodeFrame copies what it keeps). */
export interface ReceivedFrame { kind: number; call: number; source: Uint8Array; start: number; end: number }

/** Splits the message `source[0, length)` into its frames; INVALID_ARGUMENT when an entry is cut
 *  short, the message is empty or it carries more than MAX_MESSAGE_FRAMES frames: then none of its
 *  frames is used. The header words are read
 *  byte by byte, for the reason packMessage writes them so. */
export function unpackMessage(source: Uint8Array, length = source.length): ReceivedFrame[] {
  if (length > source.length) throw new RangeError(`a message of ${length} bytes in ${source.length}`);
  const frames: ReceivedFrame[] = [];
  for (let at = 0; at < length;) {
    if (at + FRAME_HEADER > length) throw malformed('a frame header runs past the end of the message');
    const kind = source[at]!;
    const call = u32(source, at + 1);
    const size = u32(source, at + 5);
    at += FRAME_HEADER;
    if (at + size > length) throw malformed(`a frame of ${size} bytes runs past the end of the message`);
    if (frames.length === MAX_MESSAGE_FRAMES) throw malformed(`more than ${MAX_MESSAGE_FRAMES} frames in one message`);
    frames.push({ kind, call, source, start: at, end: at + size });
    at += size;
  }
  if (frames.length === 0) throw malformed('empty control message');
  return frames;
}

/** Writes `value` as the big-endian u32 at `at`. */
function putU32(out: Uint8Array, at: number, value: number): void {
  out[at] = value >>> 24;
  out[at + 1] = value >>> 16;
  out[at + 2] = value >>> 8;
  out[at + 3] = value;
}

/** The big-endian u32 at `at` (a frame header's call and length words). */
export function u32(source: Uint8Array, at: number): number {
  return ((source[at]! << 24) | (source[at + 1]! << 16) | (source[at + 2]! << 8) | source[at + 3]!) >>> 0;
}

function malformed(message: string): GdrpcError {
  return new GdrpcError(Code.INVALID_ARGUMENT, `malformed message: ${message}`);
}
