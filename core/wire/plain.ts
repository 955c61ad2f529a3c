// The msgpack a peer may send: nil, booleans, numbers, strings, byte strings, arrays and maps,
// nested at most MAX_NESTING deep, and msgpackr's `undefined`; nothing else. Checked before msgpackr decodes a frame body,
// because msgpackr decodes its extension types into objects whose making a peer can make costly:
// an Error whose message is an array of shared references (the structured-clone extensions) is
// turned into a string in time exponential in its depth (a 372-byte AUTH held a server's event loop
// 24 s, before any token was checked), the same references make cycles that a walk over the
// arguments never leaves (a 32-byte REQUEST hung a server for good), and Error bodies cost about
// 721 ns a byte to decode against a few for a map (a helper session playing the attacker,
// 2026-12-06, CPU box). gdrpc writes no extension type but msgpackr's `undefined` (fixext 1 of
// type 0), so no other is taken.
// The walk reads type bytes and lengths only: a byte string of any length costs one step.
import { u32 } from './message.ts';

/** Arrays and maps nested deeper than this are refused (a frame body is a map: its depth is 1). */
export const MAX_NESTING = 64;

/** What decoding a body may make, per byte of it, in heap (weighed as below), past
 *  DECODED_SLACK_BYTES. msgpack's smallest values become JavaScript objects: an empty byte string
 *  is 2 bytes on the wire and a new ArrayBuffer and view in the heap; a helper session playing a
 *  hostile server (2026-12-07) sent a client 4 MiB RESPONSEs of a `list<bytes>` result of empty
 *  strings that kept 611 MiB of heap each, and a server stream of them took the client to V8's
 *  heap limit (the process aborted). Legitimate values weigh far less a byte: numbers in a list up
 *  to 8, short strings about 24, and strings and byte strings of any length about 1. */
export const MAX_DECODED_PER_BYTE = 24;
export const DECODED_SLACK_BYTES = 64 * 1024;
/** Heap a decoded value is weighed at: a number, nil or boolean; a string's header (plus its
 *  length); a byte string's ArrayBuffer and views (plus its length); an array; a map (an object). */
const SCALAR_WEIGHT = 8;
const STRING_WEIGHT = 16;
const BYTES_WEIGHT = 256;
const ARRAY_WEIGHT = 32;
const MAP_WEIGHT = 48;

const stack = new Float64Array(MAX_NESTING);
/** Per open container (by depth, 1 for the outermost): whether it is a map, and of its keys that
 *  are array indices ("0" to "4294967294"): how many, the element capacity V8 may have given
 *  them so far, and whether they went to a dictionary. */
const isMapAt = new Uint8Array(MAX_NESTING + 1);
const indexKeysAt = new Float64Array(MAX_NESTING + 1);
const capacityAt = new Float64Array(MAX_NESTING + 1);  // -1: a dictionary now
const peakAt = new Float64Array(MAX_NESTING + 1);
const maxIndexAt = new Float64Array(MAX_NESTING + 1);
const dictionaryAt = new Uint8Array(MAX_NESTING + 1);  // a dictionary at some point

/** V8 stores an object's array-index keys as elements: fast ones, a slot each up to a capacity
 *  that grows to 1.5 times the index past it plus 16, or a dictionary. A map whose one key was
 *  "1023" decoded to an 8 KB object from 7 bytes, and one whose keys were "1023" and "2575" to
 *  31 KB from 13: helper sessions' REQUESTs of such maps (4 MB and 3.25 MB) ran servers out of
 *  heap (2026-12-07). V8's rule, for an index past the capacity, is followed: a gap of 1,024 or
 *  more from it makes a dictionary; else fast elements of the new capacity if it is at most
 *  5,000 (a young object's), or if it is less than 9 times the dictionary the keys so far would
 *  fill (kPreferFastElementsSizeFactor x kEntrySize x its capacity); else a dictionary. Weighed
 *  at 8 bytes a fast slot and 32 a dictionary key, whichever the rule says V8 may take. */
const ELEMENT_WEIGHT = 8;
const ELEMENTS_GAP = 1024;
const MAX_UNCHECKED_FAST_ELEMENTS = 5000;
const DICTIONARY_ENTRY_WEIGHT = 32;

/** The capacity V8 gives fast elements to hold index `index` (JSObject::NewElementsCapacity). */
function newCapacity(index: number): number {
  const length = index + 1;
  return length + Math.floor(length / 2) + 16;
}

/** A number dictionary's capacity for `used` entries (HashTable::ComputeCapacity). */
function dictionaryCapacity(used: number): number {
  const raw = used + Math.floor(used / 2);
  let capacity = 4;
  while (capacity < raw) capacity *= 2;
  return capacity;
}

/** A number dictionary's capacity for `used` entries at most: V8 grows one to the capacity for
 *  its entries when it would fill past two thirds, so twice that bounds it; an upper bound, for
 *  the rule that turns a dictionary fast again. */
function dictionaryCapacityAtMost(used: number): number {
  return 2 * dictionaryCapacity(used + 1);
}

/** Elements after one more index key `index`: the fast capacity, or -1 for a dictionary, given
 *  the state before (capacity, -1 for a dictionary; the largest index; how many index keys). A
 *  dictionary goes back to fast elements of the largest index once they would take no more than
 *  twice its space (JSObject::ShouldConvertToFastElements): a fourth review turned one that way
 *  and grew it to 5,000 slots (108 bytes of heap a byte; nine REQUESTs killed a server). */
export function elementsStep(capacity: number, maxIndex: number, keysBefore: number, index: number): number {
  if (capacity < 0) {
    const wanted = Math.max(index, maxIndex) + 1;
    return 6 * dictionaryCapacityAtMost(keysBefore + 1) >= wanted ? wanted : -1;
  }
  if (index < capacity) return capacity;
  if (index - capacity >= ELEMENTS_GAP) return -1;
  const next = newCapacity(index);
  if (next <= MAX_UNCHECKED_FAST_ELEMENTS) return next;
  return 9 * dictionaryCapacity(keysBefore) <= next ? -1 : next;
}

/** What `keys` index keys weigh, the largest fast capacity they had being `peak`, and whether
 *  they were a dictionary at some point. */
export function elementsWeight(peak: number, keys: number, dictionary: boolean): number {
  return ELEMENT_WEIGHT * peak + (dictionary ? DICTIONARY_ENTRY_WEIGHT * keys : 0);
}

/** Why `source[start, end)` is not exactly one plain msgpack value; undefined when it is. */
export function notPlainMsgpack(source: Uint8Array, start: number, end: number): string | undefined {
  const weighed = weighMsgpack(source, start, end);
  return typeof weighed === 'string' ? weighed : undefined;
}

// One function past the style's ~60 lines on purpose: every received frame passes through it, and
// the type dispatch moved out into a function of its own (about 1 KB of bytecode, past what V8
// inlines) cost a call per value: a 1,000-entry map weighed in 25-34 µs against 19 µs (node 20,
// the 2-core box, minimums of alternated runs, a helper session's trial, 2026-12-07).
/** What `source[start, end)` would decode to, weighed as above, when it is exactly one plain
 *  msgpack value within MAX_DECODED_PER_BYTE; else why it is not (a string). */
export function weighMsgpack(source: Uint8Array, start: number, end: number): number | string {
  let at = start;
  let depth = 0;
  /** Values still to read in the innermost open array or map (its keys and values both count). */
  let left = 1;
  /** What decoding it would make, weighed as above, and how much it may. */
  let weight = 0;
  const most = MAX_DECODED_PER_BYTE * (end - start) + DECODED_SLACK_BYTES;
  isMapAt[0] = 0;
  for (;;) {
    if (left === 0) {
      if (depth === 0) break;
      if (isMapAt[depth] === 1 && indexKeysAt[depth]! > 0) {
        weight += elementsWeight(peakAt[depth]!, indexKeysAt[depth]!, dictionaryAt[depth] === 1);
        if (weight > most) return tooHeavy(most, end - start);
      }
      depth -= 1;
      left = stack[depth]!;
      continue;
    }
    if (at >= end) return 'ends inside a value';
    const type = source[at]!;
    at += 1;
    // A map's keys are its even places (its count of values left is even before each key).
    const key = isMapAt[depth] === 1 && (left & 1) === 0;
    left -= 1;
    if (key) {
      let length: number;
      let first: number;
      if (type >= 0xa0 && type <= 0xbf) {
        length = type & 0x1f;
        first = at;
      } else if (type === 0xd9) {
        length = lengthAt(source, at, 1, end);
        first = at + 1;
      } else if (type === 0xda) {
        length = lengthAt(source, at, 2, end);
        first = at + 2;
      } else if (type === 0xdb) {
        length = lengthAt(source, at, 4, end);
        first = at + 4;
      } else {
        return 'holds a map key that is not a string (gdrpc writes string keys only)';
      }
      at = first + length;
      if (at > end) return 'ends inside a value';
      weight += STRING_WEIGHT + length + SCALAR_WEIGHT;
      const index = arrayIndex(source, first, length);
      if (index >= 0) {
        const capacity = elementsStep(capacityAt[depth]!, maxIndexAt[depth]!, indexKeysAt[depth]!, index);
        if (capacity < 0) dictionaryAt[depth] = 1;
        else if (capacity > peakAt[depth]!) peakAt[depth] = capacity;
        capacityAt[depth] = capacity;
        if (index > maxIndexAt[depth]!) maxIndexAt[depth] = index;
        indexKeysAt[depth] = indexKeysAt[depth]! + 1;
      }
      if (weight > most) return tooHeavy(most, end - start);
      continue;
    }
    let items = -1;  // an array's or map's count of values, once known
    if (type <= 0x7f || type >= 0xe0) {  // fixint
      weight += SCALAR_WEIGHT;
      continue;
    }
    const from = at;
    if (type <= 0x8f) {  // fixmap
      items = 2 * (type & 0x0f);
      weight += MAP_WEIGHT;
    } else if (type <= 0x9f) {  // fixarray
      items = type & 0x0f;
      weight += ARRAY_WEIGHT;
    } else if (type <= 0xbf) {  // fixstr
      at += type & 0x1f;
      weight += STRING_WEIGHT;
    } else {
      switch (type) {
        case 0xc0: case 0xc2: case 0xc3: break;  // nil, false, true
        case 0xc4: at += 1 + lengthAt(source, at, 1, end); weight += BYTES_WEIGHT; break;  // bin8
        case 0xc5: at += 2 + lengthAt(source, at, 2, end); weight += BYTES_WEIGHT; break;  // bin16
        case 0xc6: at += 4 + lengthAt(source, at, 4, end); weight += BYTES_WEIGHT; break;  // bin32
        case 0xd9: at += 1 + lengthAt(source, at, 1, end); weight += STRING_WEIGHT; break;  // str8
        case 0xda: at += 2 + lengthAt(source, at, 2, end); weight += STRING_WEIGHT; break;  // str16
        case 0xdb: at += 4 + lengthAt(source, at, 4, end); weight += STRING_WEIGHT; break;  // str32
        case 0xcc: case 0xd0: at += 1; break;
        case 0xcd: case 0xd1: at += 2; break;
        case 0xca: case 0xce: case 0xd2: at += 4; break;
        case 0xcb: case 0xcf: case 0xd3: at += 8; break;
        case 0xdc: items = lengthAt(source, at, 2, end); at += 2; weight += ARRAY_WEIGHT; break;
        case 0xdd: items = lengthAt(source, at, 4, end); at += 4; weight += ARRAY_WEIGHT; break;
        case 0xde: items = 2 * lengthAt(source, at, 2, end); at += 2; weight += MAP_WEIGHT; break;
        case 0xdf: items = 2 * lengthAt(source, at, 4, end); at += 4; weight += MAP_WEIGHT; break;
        // fixext 1 of type 0: how msgpackr writes `undefined` (a field left undefined in a
        // handler's result), decoded as undefined; no other extension.
        case 0xd4:
          if (at < end && source[at] === 0) {
            at += 2;
            break;
          }
          return 'holds a msgpack extension type other than 0 (undefined), which gdrpc never sends';
        case 0xc1: return 'holds the byte 0xc1, which msgpack never uses';
        default: return `holds a msgpack extension (0x${type.toString(16)}), which gdrpc never sends`;
      }
    }
    // Scalars and lengths: what follows the type byte is its length in the heap (strings, byte
    // strings), or nothing more.
    if (at > end) return 'ends inside a value';
    weight += at - from + SCALAR_WEIGHT;
    if (weight > most) return tooHeavy(most, end - start);
    if (items < 0) continue;
    // Every value takes a byte at least: a count past the bytes left cannot be met.
    if (items > end - at) return 'ends inside a value';
    if (items === 0) continue;
    if (depth === MAX_NESTING) return `nests arrays and maps more than ${MAX_NESTING} deep`;
    stack[depth] = left;
    depth += 1;
    left = items;
    isMapAt[depth] = type <= 0x8f || type === 0xde || type === 0xdf ? 1 : 0;
    capacityAt[depth] = 0;
    peakAt[depth] = 0;
    maxIndexAt[depth] = -1;
    dictionaryAt[depth] = 0;
    indexKeysAt[depth] = 0;
  }
  if (at !== end) return at > end ? 'ends inside a value' : `has ${end - at} bytes after its value`;
  return weight;
}

function tooHeavy(most: number, bytes: number): string {
  return `would decode to more than ${most} bytes of heap (${MAX_DECODED_PER_BYTE} a byte of its ${bytes}, past ${DECODED_SLACK_BYTES}): values this small and many are tensors' work`;
}

/** The array index key `key` names ("0" to "4294967294", no leading zero), -1 for any other:
 *  as the walk reads a key's bytes (a digit is one byte in UTF-8, anything else not a digit). */
export function arrayIndexOf(key: string): number {
  if (key.length > 10) return -1;
  const bytes = Buffer.from(key, 'utf8');
  return arrayIndex(bytes, 0, bytes.length);
}

/** The array index a map key of `length` bytes at `first` names ("0" to "4294967294", no leading
 *  zero), which V8 stores as an element; -1 for any other key. */
function arrayIndex(source: Uint8Array, first: number, length: number): number {
  if (length === 0 || length > 10 || (length > 1 && source[first] === 0x30)) return -1;
  let value = 0;
  for (let i = first; i < first + length; i += 1) {
    const digit = source[i]! - 0x30;
    if (digit < 0 || digit > 9) return -1;
    value = value * 10 + digit;
  }
  return value <= 4294967294 ? value : -1;
}

/** The big-endian length of `bytes` bytes at `at` (0 when it lies past `end`: the walk then finds
 *  the value cut short). */
function lengthAt(source: Uint8Array, at: number, bytes: 1 | 2 | 4, end: number): number {
  if (at + bytes > end) return 0;
  if (bytes === 1) return source[at]!;
  if (bytes === 2) return (source[at]! << 8) | source[at + 1]!;
  return u32(source, at);
}
