// Deterministic test contents, so both processes can produce and check the same bytes.
import { createHash } from 'node:crypto';

/** Fills `bytes` with a pattern that differs per seed and per position (no short period). */
export function fillPattern(bytes: Uint8Array, seed: number): Uint8Array {
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < bytes.length; i++) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    bytes[i] = x & 0xff;
  }
  return bytes;
}

export function pattern(size: number, seed: number): Buffer {
  return fillPattern(Buffer.allocUnsafe(size), seed) as Buffer;
}

export function digest(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}
