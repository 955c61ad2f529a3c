// Received frames in tests: a body on its own as decodeFrame takes it (what unpackMessage gives
// for a frame that starts a source and ends it), and a received frame's body as a view.
import type { ReceivedFrame } from '../../core/wire/message.ts';

export function frameOf(kind: number, call: number, body: Uint8Array): ReceivedFrame {
  return { kind, call, source: body, start: 0, end: body.length };
}

export function frameBody(frame: ReceivedFrame): Uint8Array {
  return frame.source.subarray(frame.start, frame.end);
}
