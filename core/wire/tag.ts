// The 64-bit UCX tag of every gdrpc message. One worker receives for many connections, so the tag
// (not the sender, which UCX tag matching does not report) says whose message it is:
//
//   63        56 55                     32 31                              0
//  +------------+-------------------------+--------------------------------+
//  | class/kind |  connection id (24 bit) |  call id / transfer id (32 bit)|
//  +------------+-------------------------+--------------------------------+
//
// Byte 7 is 0x80 | kind for control frames and 0x01 for tensor bytes, so one posted receive with
// mask CONTROL_MASK takes every control frame and never a tensor payload, which is matched by an
// exact tag on a receive posted into its destination. The connection id is the one the
// *receiving* side assigned, so ids never collide on a worker. See docs/wire.md.
import { Code, GdrpcError } from '../errors.ts';
import { FrameKind } from './frames.ts';

/** Bit 63: set on control frames, clear on tensor payloads. */
export const CONTROL_BIT = 1n << 63n;
/** Mask that selects every control frame (and no payload) on a receive. */
export const CONTROL_MASK = CONTROL_BIT;
/** Byte 7 of a tensor payload tag. */
export const DATA_CLASS = 0x01;
/** Every bit: exact match. */
export const EXACT_MASK = 0xffff_ffff_ffff_ffffn;
/** Largest connection id (24 bits); 0 is reserved for the server's first frame (HELLO). */
export const MAX_CONNECTION_ID = 0xff_ffff;
/** Largest call or transfer id (32 bits); ids wrap around and skip 0. */
export const MAX_CALL_ID = 0xffff_ffff;

/** Tag of a control frame of `kind` for connection `connection` (receiver's id) and call `call`. */
export function controlTag(kind: FrameKind, connection: number, call: number): bigint {
  return (BigInt(0x80 | kind) << 56n) | (BigInt(connection) << 32n) | BigInt(call >>> 0);
}

/** Tag of the payload of transfer `transfer` on connection `connection` (receiver's id). */
export function dataTag(connection: number, transfer: number): bigint {
  return (BigInt(DATA_CLASS) << 56n) | (BigInt(connection) << 32n) | BigInt(transfer >>> 0);
}

/** The fields of a received tag. */
export interface ParsedTag { control: boolean; kind: number; connection: number; id: number }

/** Splits a tag into class, kind, connection id and call/transfer id. */
export function parseTag(tag: bigint): ParsedTag {
  const top = Number((tag >> 56n) & 0xffn);
  const connection = Number((tag >> 32n) & 0xff_ffffn);
  const id = Number(tag & 0xffff_ffffn);
  if ((top & 0x80) !== 0) return { control: true, kind: top & 0x7f, connection, id };
  if (top !== DATA_CLASS) {
    throw new GdrpcError(Code.INVALID_ARGUMENT, `tag 0x${tag.toString(16)} has unknown class byte 0x${top.toString(16)}`);
  }
  return { control: false, kind: 0, connection, id };
}

/** Hands out 32-bit ids that skip 0 and wrap. */
export class IdSequence {
  #next: number;
  constructor(private readonly max: number = MAX_CALL_ID, start = 1) { this.#next = start; }
  /** The next id; callers that keep ids live check for reuse themselves (wrap takes 2^32 ids). */
  next(): number {
    const id = this.#next;
    this.#next = id >= this.max ? 1 : id + 1;
    return id;
  }
}
