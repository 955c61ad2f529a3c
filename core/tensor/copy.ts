// Byte copies between storages on any devices. Host to host is a typed-array set; anything
// involving a GPU goes through cuMemcpy, which with unified addressing takes any mix of device
// pointers and host views (and device-to-device between GPUs).
import { cuda } from '../cuda.ts';
import type { Storage } from './storage.ts';

/** Copies all of `src` into `dst` (same byte length, both live). */
export function copyStorage(dst: Storage, src: Storage): void {
  dst.assertLive();
  src.assertLive();
  const bytes = src.byteLength;
  if (bytes === 0) return;
  if (dst.host && src.host) {
    dst.host.set(src.host);
    return;
  }
  cuda.copy(dst.host ?? dst.address, src.host ?? src.address, bytes);
}

/** Copies `into.byteLength` bytes of `src` from `offset` into the host view `into`. */
export function readStorage(src: Storage, offset: number, into: Uint8Array): void {
  src.assertLive();
  if (into.byteLength === 0) return;
  if (src.host) {
    into.set(src.host.subarray(offset, offset + into.byteLength));
    return;
  }
  cuda.copy(into, src.address + BigInt(offset), into.byteLength);
}

/** Largest piece compared at once, so equality of a GPU tensor never needs its whole size in host memory. */
const COMPARE_CHUNK = 64 * 1024 * 1024;

/** Byte equality of two storages of equal length, wherever they live. */
export function sameBytes(a: Storage, b: Storage): boolean {
  a.assertLive();
  b.assertLive();
  if (a.host && b.host) return Buffer.from(a.host.buffer, a.host.byteOffset, a.host.byteLength).equals(b.host);
  const length = a.byteLength;
  const chunk = Math.min(length, COMPARE_CHUNK);
  const left = new Uint8Array(chunk);
  const right = new Uint8Array(chunk);
  for (let offset = 0; offset < length; offset += chunk) {
    const n = Math.min(chunk, length - offset);
    const l = left.subarray(0, n);
    const r = right.subarray(0, n);
    readStorage(a, offset, l);
    readStorage(b, offset, r);
    if (!Buffer.from(l.buffer, 0, n).equals(r)) return false;
  }
  return true;
}
