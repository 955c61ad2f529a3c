// What msgpack a frame body may hold (core/wire/plain.ts): plain values only. Each refused case is
// written out as bytes, the attacks among them as a helper session sent them (2026-12-06): an
// Error whose message is a tower of shared references, decoded by msgpackr in time exponential in
// its depth, and a cyclic argument that a walk over the arguments never left.
import { describe, expect, it } from 'vitest';
import { Packr } from 'msgpackr';
import { MAX_NESTING, notPlainMsgpack } from '../../core/wire/plain.ts';
import { decodeFrame } from '../../core/wire/codec.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { frameOf } from '../support/frames.ts';
import { GdrpcError } from '../../core/errors.ts';

const packr = new Packr({ useRecords: false, int64AsType: 'bigint', mapsAsObjects: true });
const check = (bytes: Uint8Array | number[]): string | undefined => {
  const array = Uint8Array.from(bytes);
  return notPlainMsgpack(array, 0, array.length);
};

/** An array of `depth` levels, each a pair of one shared inner array: 2^depth elements once
 *  expanded, a few bytes a level on the wire (msgpackr's id 0x69 and pointer 0x70 extensions). */
function sharedTower(depth: number): Uint8Array {
  const out: number[] = [];
  for (let level = 0; level < depth; level += 1) {
    out.push(0x92, 0xd6, 0x69, 0, 0, 0, level);  // [ <id level: ...>, <pointer level> ]
  }
  out.push(0xc0);
  for (let level = depth - 1; level >= 0; level -= 1) out.push(0xd6, 0x70, 0, 0, 0, level);
  return Uint8Array.from(out);
}

describe('plain msgpack', () => {
  it('takes every value gdrpc writes: nil, booleans, ints of every width, floats, strings, byte strings, arrays, maps, undefined', () => {
    const values: unknown[] = [
      null, true, false, 0, 1, 127, 128, 255, 256, 65_535, 65_536, 2 ** 32 - 1, 2 ** 40, -1, -32, -33, -128, -129, -32_768, -32_769, -(2 ** 31), -(2 ** 40),
      1.5, -0.25, Number.MAX_VALUE, 2n ** 63n, -(2n ** 63n), 0xffff_ffff_ffff_ffffn,
      '', 'a', 'x'.repeat(31), 'x'.repeat(32), 'x'.repeat(255), 'x'.repeat(256), 'x'.repeat(70_000), 'é€𝄞',
      new Uint8Array(0), new Uint8Array(255), new Uint8Array(256), new Uint8Array(70_000),
      [], [1, [2, [3, []]]], Array.from({ length: 16 }, (_, i) => i), Array.from({ length: 70_000 }, (_, i) => i & 0x7f),
      {}, { v: 2, svc: 'gdrpc.test.Echo', m: 'ping', a: { n: 1, s: 'x', b: new Uint8Array([1, 2]), l: [{ t: 1 }] }, to: 30_000 },
      Object.fromEntries(Array.from({ length: 16 }, (_, i) => [`k${i}`, i])),
      { left: undefined, right: [undefined] },
    ];
    for (const value of values) {
      const bytes = packr.pack(value);
      expect([value, check(bytes)]).toEqual([value, undefined]);
    }
    // A map of more than 65,535 entries is a map32 (msgpackr writes one with variableMapSize).
    const wide = new Packr({ useRecords: false, variableMapSize: true }).pack(Object.fromEntries(Array.from({ length: 70_000 }, (_, i) => [`k${i}`, null])));
    expect(wide[0]).toBe(0xdf);
    expect(check(wide)).toBeUndefined();
  });

  it(`takes nesting up to ${MAX_NESTING} deep, and refuses one level more`, () => {
    let deep: unknown = 1;
    for (let level = 0; level < MAX_NESTING; level += 1) deep = [deep];
    expect(check(packr.pack(deep))).toBeUndefined();
    expect(check(packr.pack([deep]))).toBe(`nests arrays and maps more than ${MAX_NESTING} deep`);
    expect(check(packr.pack({ a: deep }))).toBe(`nests arrays and maps more than ${MAX_NESTING} deep`);
  });

  it('refuses every extension but msgpackr\'s undefined', () => {
    const cases: Array<[string, number[]]> = [
      ['Error (0x65)', [0xd4, 0x65, 0xc0]],
      ['structured-clone id (0x69)', [0xd6, 0x69, 0, 0, 0, 0]],
      ['structured-clone pointer (0x70)', [0xd6, 0x70, 0, 0, 0, 0]],
      ['timestamp (-1)', [0xd6, 0xff, 0, 0, 0, 0]],
      ['ext 8 of a typed array (0x74)', [0xc7, 1, 0x74, 0]],
      ['ext 16', [0xc8, 0, 1, 0x78, 0]],
      ['ext 32', [0xc9, 0, 0, 0, 1, 0x62, 0]],
      ['fixext 2, 4, 8, 16', [0xd5, 0x73, 0, 0]],
      ['fixext 1 of another type', [0xd4, 0x01, 0]],
    ];
    for (const [name, bytes] of cases) expect([name, check(bytes)]).toEqual([name, expect.stringMatching(/extension/)]);
    for (const type of [0xd7, 0xd8]) expect(check([type, 0x10, ...new Array(type === 0xd7 ? 8 : 16).fill(0)])).toMatch(/extension/);
    expect(check([0xd4, 0x00, 0x00])).toBeUndefined();
    // Inside a map, as a body would carry it.
    expect(check([0x81, 0xa1, 0x61, 0xd4, 0x65, 0xc0])).toMatch(/extension type other than 0/);
    expect(check([0x81, 0xa1, 0x61, 0xd6, 0x65, 0, 0, 0, 0])).toMatch(/extension \(0xd6\)/);
  });

  it('refuses a value cut short, bytes after it, a count past the bytes left and the byte msgpack never uses', () => {
    expect(check([0x92, 0x01])).toBe('ends inside a value');
    expect(check([0xda, 0x00, 0x05, 0x61])).toBe('ends inside a value');
    expect(check([0xc6, 0xff, 0xff, 0xff, 0xff])).toBe('ends inside a value');
    expect(check([0xcb, 0, 0])).toBe('ends inside a value');
    expect(check([0xdd, 0xff, 0xff, 0xff, 0xff, 0x01])).toBe('ends inside a value');  // 4 billion items
    expect(check([0xdf, 0x7f, 0xff, 0xff, 0xff])).toBe('ends inside a value');
    expect(check([0xdc])).toBe('ends inside a value');
    expect(check([])).toBe('ends inside a value');
    expect(check([0x01, 0x02])).toBe('has 1 bytes after its value');
    expect(check([0xc1])).toMatch(/0xc1/);
  });

  it('the attacks: a tower of shared references inside an Error, and a cycle, are refused before msgpackr reads them', () => {
    const tower = sharedTower(40);  // 2^40 elements expanded
    const error = Uint8Array.from([0x81, 0xa1, 0x6b, 0xd4, 0x65, ...tower]);  // {k: Error(<tower>)}
    const started = performance.now();
    expect(check(error)).toMatch(/extension/);
    const cycle = Uint8Array.from([0x81, 0xa1, 0x61, 0x81, 0xa1, 0x63, 0xd6, 0x69, 0, 0, 0, 1, 0x91, 0xd6, 0x70, 0, 0, 0, 1]);  // {a: {c: <id 1: [<pointer 1>]>}}
    expect(check(cycle)).toMatch(/extension/);
    // Through decodeFrame, as an AUTH and a REQUEST would arrive.
    for (const body of [error, cycle]) {
      const refused = (() => { try { decodeFrame(frameOf(FrameKind.Request, 1, body)); } catch (e) { return e; } })();
      expect(refused).toBeInstanceOf(GdrpcError);
      expect((refused as GdrpcError).message).toMatch(/INVALID_ARGUMENT.*REQUEST frame body holds a msgpack extension/);
    }
    // Refused by reading a few type bytes: nowhere near the seconds the expansion took.
    expect(performance.now() - started).toBeLessThan(5_000);
  });

  it('a byte string costs one step whatever its length: its bytes are not read', () => {
    // Extension type bytes inside a byte string or a string are data, not extensions.
    const bin = new Uint8Array(1 << 20).fill(0xd4);
    expect(check(packr.pack({ b: bin, s: '\u00d4'.repeat(1000) }))).toBeUndefined();
  });
});

describe('what a frame body may decode to', () => {
  it('refuses bodies of many tiny values that would make many times their bytes of heap (a hostile server\'s 4 MiB of empty byte strings kept 611 MiB of a client\'s heap)', () => {
    const emptyBytes = packr.pack({ bs: Array.from({ length: 100_000 }, () => new Uint8Array(0)) });
    expect(check(emptyBytes)).toMatch(/would decode to more than \d+ bytes of heap/);
    const emptyLists = packr.pack({ ls: Array.from({ length: 100_000 }, () => []) });
    expect(check(emptyLists)).toMatch(/would decode to more/);
    // Through decodeFrame, as a RESPONSE would arrive: INVALID_ARGUMENT, before msgpackr runs.
    const refused = (() => { try { decodeFrame(frameOf(FrameKind.Response, 1, emptyBytes)); } catch (e) { return e; } })();
    expect((refused as GdrpcError).message).toMatch(/INVALID_ARGUMENT.*RESPONSE frame body would decode to more/);
  });

  it('takes what legitimate bodies hold: lists of numbers, short strings, small records, empty strings, large byte strings', () => {
    expect(check(packr.pack({ xs: Array.from({ length: 200_000 }, (_, i) => i * 7919) }))).toBeUndefined();
    expect(check(packr.pack({ xs: Array.from({ length: 200_000 }, (_, i) => i & 0x7f) }))).toBeUndefined();
    expect(check(packr.pack({ xs: Array.from({ length: 100_000 }, (_, i) => 1.5 * i) }))).toBeUndefined();
    expect(check(packr.pack({ ss: Array.from({ length: 100_000 }, (_, i) => `k${i % 100}`) }))).toBeUndefined();
    expect(check(packr.pack({ ss: Array.from({ length: 100_000 }, () => '') }))).toBeUndefined();
    expect(check(packr.pack({ rs: Array.from({ length: 20_000 }, (_, i) => ({ a: i & 0x7f, b: 'x' })) }))).toBeUndefined();
    expect(check(packr.pack({ b: new Uint8Array(4 << 20), bs: Array.from({ length: 1000 }, () => new Uint8Array(64)) }))).toBeUndefined();
    // A small body of small values passes on the slack whatever its shape.
    expect(check(packr.pack({ bs: Array.from({ length: 100 }, () => new Uint8Array(0)) }))).toBeUndefined();
    // Maps keyed by numbers as strings, as a schema map<f32> of token ids would be: sparse large
    // ids, and dense small ones.
    const logprobs = Array.from({ length: 200 }, (_, p) => Object.fromEntries(Array.from({ length: 20 }, (__, k) => [String(50_000 + p * 20 + k), -k / 3])));
    expect(check(packr.pack({ lp: logprobs }))).toBeUndefined();
    expect(check(packr.pack({ dense: Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [String(i), i])) }))).toBeUndefined();
  });

  it('weighs maps whose keys are array indices by the elements V8 gives them (a map whose one key is "1023" decodes to an 8 KB object), and refuses keys that are not strings', () => {
    // 800,000 of these in a 4 MB REQUEST ran a server out of heap (a helper session's attack).
    const indexKeyed = Uint8Array.from([0xdc, 0x27, 0x10, ...Array.from({ length: 10_000 }, () => [0x81, 0xa4, 0x31, 0x30, 0x32, 0x33, 0x00]).flat()]);
    expect(check(indexKeyed)).toMatch(/would decode to more/);
    const numberKeyed = Uint8Array.from([0x81, 0xcd, 0x03, 0xff, 0x00]);  // {1023: 0}
    expect(check(numberKeyed)).toMatch(/map key that is not a string/);
    // Keys each within 1,024 of the capacity before: "1023" then "2575" grow fast elements to
    // 3,880 slots, 31 KB from 13 bytes (a second review's REQUEST of 250,000 killed a server).
    const stepped = Uint8Array.from([0xdc, 0x27, 0x10, ...Array.from({ length: 10_000 }, () => [0x82, 0xa4, 0x31, 0x30, 0x32, 0x33, 0x00, 0xa4, 0x32, 0x35, 0x37, 0x35, 0x00]).flat()]);
    expect(check(stepped)).toMatch(/would decode to more/);
    // A dictionary that turns fast again: "0" and "1041" make one, 90 small keys fill it until
    // fast elements of 1,042 slots take no more than twice its space, then "2065" and "3321"
    // grow them to 5,000 (a fourth review: 108 bytes of heap a byte; nine REQUESTs killed a
    // server).
    const refast = ['0', '1041', ...Array.from({ length: 90 }, (_, i) => String(i + 1)), '2065', '3321'];
    const refastMaps = packr.pack({ l: Array.from({ length: 2000 }, () => Object.fromEntries(refast.map((k) => [k, 0]))) });
    expect(check(refastMaps)).toMatch(/would decode to more/);
    // 1,000 token counts over a 50k vocabulary stay a dictionary in V8 and pass.
    const counts = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [String(i * 50 + (i % 7)), i]));
    expect(check(packr.pack({ counts }))).toBeUndefined();
    // Sparse ids over a large vocabulary go to a dictionary in V8: logit biases pass.
    const bias = Array.from({ length: 64 }, (_, r) => Object.fromEntries(Array.from({ length: 100 }, (__, k) => [String(((k * 997 + r * 31) % 100_000)), k / 10])));
    expect(check(packr.pack({ bias }))).toBeUndefined();
    const users = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [String(100_000 + i * 811), { name: `u${i}`, age: i % 90 }]));
    expect(check(packr.pack({ users }))).toBeUndefined();
    expect(check([0x81, 0x7f, 0x00])).toMatch(/map key that is not a string/);
    expect(check([0x81, 0xc0, 0x00])).toMatch(/map key that is not a string/);
    // Keys that are not indices weigh as strings.
    expect(check(packr.pack({ rows: Array.from({ length: 10_000 }, () => ({ '01': 0 })) }))).toBeUndefined();
  });
});
