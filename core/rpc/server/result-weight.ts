// What a handler's returned object holds in this process's memory, roughly: the weight a call
// waiting for room (room.ts) adds to what its runtime counts as held for peers (waiting.ts).
// Before answers waiting for room were counted, peers that took nothing had a server hold their
// calls' answers unencoded and uncounted for up to the liveness time: 8 raw peers asking 128
// echoes of 4 MB each grew a server's RSS to 3 GB in 10 s on the 2-core box, while what it
// counted stayed at 134 MiB (2026-12-07), and a faster peer or more of them would have run the
// process out of memory.
import { Tensor } from '../../tensor/tensor.ts';
import { arrayIndexOf, elementsStep, elementsWeight } from '../../wire/plain.ts';

/** What a value counts for however small: a number, a key, an empty object. */
const SLOT_BYTES = 16;
/** Nodes visited at most, so that the weighing costs bounded time (a call waits for room only
 *  when its peer is behind: the fast path weighs nothing). What is left unvisited then is
 *  weighed by its outside alone (a string's length, binary data's bytes, an array's or object's
 *  slots), which misses what it nests. */
const MAX_NODES = 1_000_000;

/** Bytes `value` holds: strings by their length, binary data by its bytes, host tensors outside
 *  any pool by theirs (pooled and device tensors are bounded by their pools and count a slot),
 *  everything else a slot a value and a key. A string made by `repeat` counts its full length,
 *  as it will once encoded. */
export function resultWeight(value: unknown): number {
  let bytes = 0;
  let nodes = 0;
  const stack: unknown[] = [value];
  const seen = new Set<object>();
  while (stack.length > 0) {
    const item = stack.pop();
    nodes += 1;
    if (nodes > MAX_NODES) return bytes + outside(item) + stack.reduce<number>((sum, left) => sum + outside(left), 0);
    bytes += SLOT_BYTES;
    if (typeof item === 'string') {
      bytes += item.length;
      continue;
    }
    if (typeof item !== 'object' || item === null || seen.has(item)) continue;
    seen.add(item);
    if (ArrayBuffer.isView(item) || item instanceof ArrayBuffer || item instanceof SharedArrayBuffer) {
      bytes += item.byteLength;
    } else if (item instanceof Tensor) {
      if (item.device === 'cpu' && item.pool === undefined) bytes += item.byteLength;
    } else if (Array.isArray(item)) {
      for (const element of item) stack.push(element);
    } else if (item instanceof Map) {
      for (const [key, element] of item) stack.push(key, element);
    } else {
      // Keys that are array indices are elements (Object.keys lists them first, ascending, as
      // they would have been added): weighed as the wire check weighs them (plain.ts).
      let capacity = 0;
      let peak = 0;
      let maxIndex = -1;
      let dictionary = false;
      let indices = 0;
      for (const key of Object.keys(item)) {
        bytes += key.length;
        const index = arrayIndexOf(key);
        if (index >= 0) {
          capacity = elementsStep(capacity, maxIndex, indices, index);
          if (capacity < 0) dictionary = true;
          else if (capacity > peak) peak = capacity;
          if (index > maxIndex) maxIndex = index;
          indices += 1;
        }
        stack.push((item as Record<string, unknown>)[key]);
      }
      if (indices > 0) bytes += elementsWeight(peak, indices, dictionary);
    }
  }
  return bytes;
}

/** What `value` weighs without what its members nest: its slots, and its members' own strings
 *  and binary data (a string's length, binary data's bytes). */
function outside(value: unknown): number {
  const flat = (member: unknown): number => (typeof member === 'string' ? SLOT_BYTES + member.length
    : ArrayBuffer.isView(member) || member instanceof ArrayBuffer || member instanceof SharedArrayBuffer ? SLOT_BYTES + member.byteLength
      : SLOT_BYTES);
  if (typeof value !== 'object' || value === null || ArrayBuffer.isView(value) || value instanceof ArrayBuffer || value instanceof SharedArrayBuffer) return flat(value);
  let bytes = SLOT_BYTES;
  if (Array.isArray(value)) for (const member of value) bytes += flat(member);
  else if (value instanceof Map) for (const [key, member] of value) bytes += flat(key) + flat(member);
  else for (const key of Object.keys(value)) bytes += SLOT_BYTES + key.length + flat((value as Record<string, unknown>)[key]);
  return bytes;
}
