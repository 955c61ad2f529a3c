// The 64-bit UCX tag of every gdrpc message (docs/wire.md "Tags and connection keys"). UCX tag
// matching does not say which endpoint sent a message, so the tag itself must tie a message to its
// connection in a way a third party cannot forge: each side draws a random 56-bit key per
// connection and tells it only to that connection's peer (in HELLO or AUTH, sent on its endpoint).
//
//   control:  | 0x80 |                       key (56 bits)                        |
//   tensor:   | 0x01 |  key bits 55..32 (24)  |  (key bits 31..0 + transfer id) mod 2^32  |
//
// A control message may hold several frames (wire/message.ts), so kind and call id travel in the
// body. Tensor tags keep the key's top 24 bits as a per-worker unique prefix, which lets the
// receiver find the connection of a message nobody posted a receive for (and drop it), while the
// low 32 bits stay secret: forging a tag means guessing 56 random bits.
import { randomBytes } from 'node:crypto';

/** Bit 63: set on control messages, clear on tensor payloads. */
export const CONTROL_BIT = 1n << 63n;
/** Mask that selects every control message (and no payload) on a receive. */
export const CONTROL_MASK = CONTROL_BIT;
/** Byte 7 of a tensor payload tag. */
export const DATA_CLASS = 0x01;
/** Every bit: exact match. */
export const EXACT_MASK = 0xffff_ffff_ffff_ffffn;
/** The byte-7-and-prefix part of a tensor tag: selects one connection's payloads. */
export const DATA_PREFIX_MASK = 0xffff_ffff_0000_0000n;
/** Largest call or transfer id (32 bits); ids wrap around and skip 0. */
export const MAX_CALL_ID = 0xffff_ffff;
/** The key of the first message on a new connection (HELLO), before the client knows the server's. */
export const HELLO_KEY = 0n;

/** The key of the HELLO for the connection that came from client port `port` (1 to 65535): key
 *  0's prefix with the port as its low word (docs/wire.md "Handshake and admission"). */
export function helloKey(port: number): bigint {
  return BigInt(port);
}

const KEY_BITS = (1n << 56n) - 1n;

/** A connection key: 56 random bits, split into the 24-bit prefix and the 32-bit secret low part. */
export class ConnectionKey {
  readonly prefix: number;
  readonly low: number;
  constructor(readonly value: bigint) {
    this.prefix = Number((value >> 32n) & 0xff_ffffn);
    this.low = Number(value & 0xffff_ffffn);
  }

  /** A fresh random key whose prefix is not 0 and passes `free` (unique among a worker's keys). */
  static draw(free: (prefix: number) => boolean): ConnectionKey {
    for (;;) {
      const key = new ConnectionKey(randomBytes(8).readBigUInt64BE() & KEY_BITS);
      if (key.prefix !== 0 && free(key.prefix)) return key;
    }
  }

  /** Whether `value` (from a peer) is a well-formed key. */
  static valid(value: unknown): value is bigint {
    return typeof value === 'bigint' && value > 0n && value <= KEY_BITS && (value >> 32n) !== 0n;
  }
}

/** Tag of a control message for the connection whose receiving side drew `key`. */
export function controlTag(key: bigint): bigint {
  return CONTROL_BIT | (key & KEY_BITS);
}

/** Tag of the payload of transfer `transfer` on the connection whose receiving side drew `key`. */
export function dataTag(key: ConnectionKey, transfer: number): bigint {
  const low = (key.low + (transfer >>> 0)) % 0x1_0000_0000;
  return (BigInt(DATA_CLASS) << 56n) | (BigInt(key.prefix) << 32n) | BigInt(low);
}

/** The high 32 bits of every payload tag of the connection whose key has `prefix`. */
export function dataWord(prefix: number): number {
  return ((DATA_CLASS << 24) | prefix) >>> 0;
}

/** The first tag of one connection's payloads, for a probe with DATA_PREFIX_MASK. */
export function dataPrefixTag(prefix: number): bigint {
  return (BigInt(DATA_CLASS) << 56n) | (BigInt(prefix) << 32n);
}

/** The key a control tag names, or undefined when byte 7 is not exactly the control class. */
export function controlKey(tag: bigint): bigint | undefined {
  if ((tag >> 56n) !== 0x80n) return undefined;
  return tag & KEY_BITS;
}

/** The key prefix of a control tag given as its high 32-bit word (the low word is the key's
 *  low 32 bits), or undefined when byte 7 is not exactly the control class. Words rather than a
 *  bigint: the receive loop reads them from the binding without making one. */
export function controlPrefix(high: number): number | undefined {
  return high >>> 24 === 0x80 ? high & 0xff_ffff : undefined;
}

/** The prefix and low word of a payload tag, or undefined when byte 7 is not the data class. */
export function dataParts(tag: bigint): { prefix: number; low: number } | undefined {
  if ((tag >> 56n) !== BigInt(DATA_CLASS)) return undefined;
  return { prefix: Number((tag >> 32n) & 0xff_ffffn), low: Number(tag & 0xffff_ffffn) };
}

/** The transfer id of a payload tag's low word on the connection with `key`. */
export function transferOf(key: ConnectionKey, low: number): number {
  return (low - key.low + 0x1_0000_0000) % 0x1_0000_0000;
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
