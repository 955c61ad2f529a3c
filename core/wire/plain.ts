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

const stack = new Float64Array(MAX_NESTING);

/** Why `source[start, end)` is not exactly one plain msgpack value; undefined when it is. */
export function notPlainMsgpack(source: Uint8Array, start: number, end: number): string | undefined {
  let at = start;
  let depth = 0;
  /** Values still to read in the innermost open array or map (its keys and values both count). */
  let left = 1;
  for (;;) {
    if (left === 0) {
      if (depth === 0) break;
      depth -= 1;
      left = stack[depth]!;
      continue;
    }
    if (at >= end) return 'ends inside a value';
    const type = source[at]!;
    at += 1;
    left -= 1;
    let items = -1;  // an array's or map's count of values, once known
    if (type <= 0x7f || type >= 0xe0) continue;  // fixint
    if (type <= 0x8f) items = 2 * (type & 0x0f);  // fixmap
    else if (type <= 0x9f) items = type & 0x0f;  // fixarray
    else if (type <= 0xbf) at += type & 0x1f;  // fixstr
    else {
      switch (type) {
        case 0xc0: case 0xc2: case 0xc3: break;  // nil, false, true
        case 0xc4: case 0xd9: at += 1 + lengthAt(source, at, 1, end); break;  // bin8, str8
        case 0xc5: case 0xda: at += 2 + lengthAt(source, at, 2, end); break;  // bin16, str16
        case 0xc6: case 0xdb: at += 4 + lengthAt(source, at, 4, end); break;  // bin32, str32
        case 0xcc: case 0xd0: at += 1; break;
        case 0xcd: case 0xd1: at += 2; break;
        case 0xca: case 0xce: case 0xd2: at += 4; break;
        case 0xcb: case 0xcf: case 0xd3: at += 8; break;
        case 0xdc: items = lengthAt(source, at, 2, end); at += 2; break;
        case 0xdd: items = lengthAt(source, at, 4, end); at += 4; break;
        case 0xde: items = 2 * lengthAt(source, at, 2, end); at += 2; break;
        case 0xdf: items = 2 * lengthAt(source, at, 4, end); at += 4; break;
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
    if (items < 0) continue;
    // Every value takes a byte at least: a count past the bytes left cannot be met.
    if (items > end - at) return 'ends inside a value';
    if (items === 0) continue;
    if (depth === MAX_NESTING) return `nests arrays and maps more than ${MAX_NESTING} deep`;
    stack[depth] = left;
    depth += 1;
    left = items;
  }
  if (at !== end) return at > end ? 'ends inside a value' : `has ${end - at} bytes after its value`;
  return undefined;
}

/** The big-endian length of `bytes` bytes at `at` (0 when it lies past `end`: the walk then finds
 *  the value cut short). */
function lengthAt(source: Uint8Array, at: number, bytes: 1 | 2 | 4, end: number): number {
  if (at + bytes > end) return 0;
  if (bytes === 1) return source[at]!;
  if (bytes === 2) return (source[at]! << 8) | source[at + 1]!;
  return u32(source, at);
}
