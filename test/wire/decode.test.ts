// The decode checks, kind by kind and mover by mover: a good body passes, and a missing required
// field, a value of the wrong type and a value out of bounds each fail with INVALID_ARGUMENT that
// names the frame and the field. The cases are written out by hand (not derived from the table)
// so that a change to the table shows up here as a change of behaviour.
import { describe, expect, it } from 'vitest';
import { Packr } from 'msgpackr';
import { Code, GdrpcError } from '../../core/errors.ts';
import { checkTensorWire, decodeFrame } from '../../core/wire/codec.ts';
import { frameOf } from '../support/frames.ts';
import { FRAMES, FrameKind, MOVER_FIELDS, WIRE_VERSION } from '../../core/wire/frames.ts';

type Row = Record<string, unknown>;
/** A good body, then each way of breaking it (absent where the kind has no such field). */
interface Case { good: Row; missing?: string; wrongType?: [string, unknown]; outOfBounds?: [string, unknown] }

const packr = new Packr({ useRecords: false, int64AsType: 'bigint', mapsAsObjects: true });
const KEY = 0x12_3456_789a_bcden;
const bytes = (n: number): Uint8Array => new Uint8Array(n).fill(7);

const FRAME_CASES: Record<FrameKind, Case> = {
  [FrameKind.Hello]: {
    good: { key: KEY, chal: bytes(32), maxFrame: 4 << 20, maxTensor: 2 ** 40, inline: 4096, live: 10_000, gpu: false, stg: true, rep: true, gat: true, rpt: true, win: 256 << 10, wmax: 8 << 20, cp: 50_123 },
    missing: 'maxFrame', wrongType: ['gpu', 1], outOfBounds: ['key', 0xffff_ffffn],
  },
  [FrameKind.Auth]: {
    good: { key: KEY, proof: bytes(32), live: 10_000, gpu: true, stg: false, rep: false, rpt: true, maxFrame: 1 << 22, win: 256 << 10, wmax: 8 << 20, rwin: true },
    missing: 'key', wrongType: ['proof', 'proof'], outOfBounds: ['maxFrame', -1],
  },
  [FrameKind.Ready]: { good: { win: 8 << 20 }, wrongType: ['win', '8M'], outOfBounds: ['win', -1] },
  [FrameKind.Request]: {
    good: { svc: 's.S', m: 'm', a: { n: 1 }, to: 5, md: { k: 'v' }, win: 64, mv: 'tag', ns: true },
    missing: 'svc', wrongType: ['md', { k: 1 }], outOfBounds: ['to', 1.5],
  },
  [FrameKind.Response]: { good: { r: { x: 1 } }, missing: 'r', wrongType: ['r', [1]] },
  [FrameKind.Error]: { good: { code: 'NOT_FOUND', msg: 'no', det: { path: 'a.b' } }, missing: 'msg', wrongType: ['code', 5] },
  [FrameKind.Cancel]: { good: { code: 'DEADLINE_EXCEEDED' }, wrongType: ['code', true] },
  [FrameKind.StreamItem]: { good: { seq: 0, a: {} }, missing: 'a', wrongType: ['a', 'a'], outOfBounds: ['seq', -1] },
  [FrameKind.StreamEnd]: { good: { seq: 3 }, missing: 'seq', wrongType: ['seq', '3'], outOfBounds: ['seq', 2 ** 53] },
  [FrameKind.Keepalive]: { good: {} },
  [FrameKind.Fin]: { good: { x: 7 }, missing: 'x', wrongType: ['x', 'seven'], outOfBounds: ['x', -1] },
  [FrameKind.GoAway]: { good: {} },
  [FrameKind.Credit]: { good: { n: 32, id: 2 ** 32 - 1, loan: true }, missing: 'n', wrongType: ['loan', 1], outOfBounds: ['n', 0.5] },
  [FrameKind.Sent]: { good: { x: 9, p: 'tag_send from host memory length 8 eager short tcp/lo' }, missing: 'p', wrongType: ['p', 1], outOfBounds: ['x', 2 ** 53] },
  [FrameKind.Ack]: { good: { id: 7, no: true }, missing: 'id', wrongType: ['no', 'no'], outOfBounds: ['id', -1] },
  [FrameKind.Want]: { good: { n: 5 << 20 }, missing: 'n', wrongType: ['n', 'n'], outOfBounds: ['n', -1] },
  [FrameKind.Reports]: { good: { x: [9, 2 ** 32 - 1], d: [0, 0], p: { 0: 'tag_send from host memory length 8 eager short tcp/lo' } }, missing: 'd', wrongType: ['p', { 0: 1 }], outOfBounds: ['x', [1, -1]] },
};

const common = { dt: 'u8', sh: [2, 1], n: 2, mt: 'host' };
const MOVER_CASES: Record<keyof typeof MOVER_FIELDS, Case> = {
  i: { good: { ...common, m: 'i', b: bytes(2) }, missing: 'b', wrongType: ['b', 'xy'], outOfBounds: ['b', bytes(3)] },
  t: { good: { ...common, m: 't', x: 5, st: true }, missing: 'x', wrongType: ['st', 1], outOfBounds: ['x', -1] },
  g: { good: { ...common, m: 'g', x: 5, f: 4096 }, missing: 'f', wrongType: ['f', 'zero'], outOfBounds: ['f', -1] },
  r: { good: { ...common, m: 'r', x: 1, a: 1n << 40n, k: bytes(8) }, missing: 'k', wrongType: ['a', 5], outOfBounds: ['a', -1n] },
  h: { good: { ...common, m: 'h', o: 'host:1', x: 3, s: bytes(16) }, missing: 'o', wrongType: ['s', 'cap'], outOfBounds: ['x', 2 ** 53] },
};

function decode(kind: number, body: Row): unknown {
  return decodeFrame(frameOf(kind, 3, packr.pack({ ...body, v: WIRE_VERSION }))).body;
}

/** `value` with its byte strings as arrays (msgpack hands out Buffers, the cases hold Uint8Arrays). */
function plain(value: unknown): unknown {
  if (value instanceof Uint8Array) return [...value];
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, plain(v)]));
}

/** The INVALID_ARGUMENT `fn` throws (anything else fails the test). */
function refusal(fn: () => unknown): GdrpcError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(GdrpcError);
    expect((error as GdrpcError).code).toBe(Code.INVALID_ARGUMENT);
    return error as GdrpcError;
  }
  throw new Error('accepted');
}

/** The ways `c` breaks its good body, each with the field it breaks. */
function broken(c: Case): Array<[string, string, Row]> {
  const out: Array<[string, string, Row]> = [];
  if (c.missing !== undefined) {
    const { [c.missing]: _, ...rest } = c.good;
    out.push(['missing', c.missing, rest]);
  }
  if (c.wrongType !== undefined) out.push(['wrong type', c.wrongType[0], { ...c.good, [c.wrongType[0]]: c.wrongType[1] }]);
  if (c.outOfBounds !== undefined) out.push(['out of bounds', c.outOfBounds[0], { ...c.good, [c.outOfBounds[0]]: c.outOfBounds[1] }]);
  return out;
}

const kinds = Object.values(FrameKind).filter((k): k is FrameKind => typeof k === 'number');

describe.each(kinds.map((kind) => [FRAMES[kind].name, kind] as const))('%s', (name, kind) => {
  const c = FRAME_CASES[kind];

  it('decodes a good body as it was sent', () => {
    expect(plain(decode(kind, c.good))).toEqual(plain({ ...c.good, v: WIRE_VERSION }));
  });

  it.each(broken(c))('refuses a body with a field %s (%s)', (_how, field, body) => {
    expect(refusal(() => decode(kind, body)).message).toContain(`${name} frame`);
    expect(refusal(() => decode(kind, body)).message).toContain(`'${field}'`);
  });

  it('has a case for each way its fields can be broken', () => {
    const fields = Object.values(FRAMES[kind].fields);
    expect(c.missing !== undefined).toBe(fields.some((f) => !('optional' in f)));
    expect(c.wrongType !== undefined).toBe(fields.length > 0);
    // Bounds exist for numbers (alone or in arrays) and keys only (strings, maps and flags have none).
    expect(c.outOfBounds !== undefined).toBe(fields.some((f) => f.type === 'uint' || f.type === 'uints' || f.type === 'key'));
  });
});

describe('any frame', () => {
  it('keeps keys the table does not list, and drops nil optional fields', () => {
    expect(decode(FrameKind.Credit, { n: 1, later: 'x' })).toEqual({ n: 1, later: 'x', v: WIRE_VERSION });
    expect(decode(FrameKind.Auth, { key: KEY, proof: null, live: null })).toEqual({ key: KEY, v: WIRE_VERSION });
  });

  it('refuses unknown kinds, another version, a body that is not a map or not msgpack', () => {
    expect(refusal(() => decode(13, {})).message).toMatch(/unknown frame kind 13/);
    expect(refusal(() => decodeFrame(frameOf(FrameKind.Fin, 1, packr.pack({ v: 1, x: 1 })))).message).toMatch(/wire version 1/);
    expect(refusal(() => decodeFrame(frameOf(FrameKind.Fin, 1, packr.pack([1])))).message).toMatch(/FIN frame is not a map/);
    expect(refusal(() => decodeFrame(frameOf(FrameKind.Fin, 1, new Uint8Array([0x81])))).message).toMatch(/FIN frame body ends inside a value/);
  });

  it('refuses a key of 0 or wider than 56 bits, and a required field sent as nil', () => {
    expect(refusal(() => decode(FrameKind.Hello, { ...FRAME_CASES[FrameKind.Hello].good, key: 0n })).message).toMatch(/bad 'key'/);
    expect(refusal(() => decode(FrameKind.Auth, { key: 1n << 56n })).message).toMatch(/bad 'key'/);
    expect(refusal(() => decode(FrameKind.Fin, { x: null })).message).toMatch(/lacks 'x'/);
  });
});

describe.each(Object.entries(MOVER_CASES))('tensor descriptor, mover %s', (mover, c) => {
  it('passes a good descriptor', () => {
    expect(checkTensorWire({ ...c.good }, 'args.x')).toEqual(c.good);
  });

  it.each(broken(c))('refuses a descriptor with a field %s (%s)', (_how, field, wire) => {
    const message = refusal(() => checkTensorWire(wire, 'args.x')).message;
    expect(message).toContain(`args.x: tensor descriptor with mover '${mover}'`);
    expect(message).toContain(`'${field}'`);
  });
});

describe('tensor descriptor, common fields', () => {
  const good = MOVER_CASES.t.good;
  it.each<[string, Row, RegExp]>([
    ['not a map', [] as unknown as Row, /is not a map/],
    ['missing dt', { ...good, dt: undefined }, /lacks 'dt'/],
    ['a shape of non-integers', { ...good, sh: [1, 'a'] }, /bad 'sh'/],
    ['a negative dimension', { ...good, sh: [-1] }, /bad 'sh'/],
    ['an unknown mover', { ...good, m: 'z' }, /bad 'm': expected one of i, t, g, r, h/],
    ['a byte length out of bounds', { ...good, n: -2 }, /bad 'n'/],
  ])('refuses %s', (_name, wire, message) => {
    expect(refusal(() => checkTensorWire(wire, 'args.x')).message).toMatch(message);
  });
});
