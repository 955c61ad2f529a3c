// A frame body on its own as decodeFrame takes it: what unpackMessage gives for a frame that
// starts a source and ends it.
import type { ReceivedFrame } from '../../core/wire/message.ts';

export function frameOf(kind: number, call: number, body: Uint8Array): ReceivedFrame {
  return { kind, call, source: body, start: 0, end: body.length };
}
