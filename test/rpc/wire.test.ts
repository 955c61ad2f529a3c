// The wire format and validation as pure functions: tag layout, frame checks, descriptor checks,
// mover choice and path classes (including the staging refusal, which needs no GPU to decide).
import { describe, expect, it } from 'vitest';
import { Packr } from 'msgpackr';
import { Code, GdrpcError, Tensor, validateFields } from '../../core/index.ts';
import { decodeFrame, encodeFrame, checkTensorWire } from '../../core/wire/codec.ts';
import { frameBody, frameOf } from '../support/frames.ts';
import { FrameKind, WIRE_VERSION } from '../../core/wire/frames.ts';
import { CONTROL_MASK, ConnectionKey, controlKey, controlPrefix, controlTag, dataParts, dataTag, transferOf } from '../../core/wire/tag.ts';
import { MAX_MESSAGE_FRAMES, packMessage, unpackMessage } from '../../core/wire/message.ts';
import { BATCH_FRAMES } from '../../core/rpc/connection/outbox.ts';
import { chooseMover } from '../../core/rpc/movers/choose.ts';
import { transferPath } from '../../core/rpc/movers/path.ts';
import type { Endpoint } from '../../core/ucx/index.ts';
import { ValidationDescriptor } from '../schemas/gen/rpc/validation.ts';
import { decodeFields, encodeFields } from '../../core/rpc/call/values.ts';

const packr = new Packr({ useRecords: false, int64AsType: 'bigint', mapsAsObjects: true });

function codeOf(fn: () => unknown): string | undefined {
  try { fn(); } catch (error) { return (error as GdrpcError).code; }
  return undefined;
}

describe('tag layout', () => {
  it('a control tag is the class byte and the 56-bit key; a payload tag hides the key plus the transfer id', () => {
    const key = new ConnectionKey(0xabcdef_fffffffen);
    expect(controlTag(key.value)).toBe(0x80abcdeffffffffen);
    expect(controlKey(controlTag(key.value))).toBe(key.value);
    expect(controlPrefix(Number(controlTag(key.value) >> 32n))).toBe(0xabcdef);
    // The low word wraps: (0xfffffffe + 3) mod 2^32 = 1.
    expect(dataTag(key, 3)).toBe(0x01abcdef00000001n);
    expect(dataParts(dataTag(key, 3))).toEqual({ prefix: 0xabcdef, low: 1 });
    expect(transferOf(key, 1)).toBe(3);
  });

  it('the control mask matches every control message and no payload; other class bytes name no connection', () => {
    const key = ConnectionKey.draw(() => true);
    expect(controlTag(key.value) & CONTROL_MASK).toBe(CONTROL_MASK);
    expect(dataTag(key, 1) & CONTROL_MASK).toBe(0n);
    expect(controlKey(0x8100000000000001n)).toBeUndefined();
    expect(controlPrefix(0x81000000)).toBeUndefined();
    expect(controlPrefix(0x00abcdef)).toBeUndefined();
    expect(dataParts(0x0200000000000000n)).toBeUndefined();
  });

  it('drawn keys are random, have a non-zero prefix and respect the caller\'s uniqueness test', () => {
    const taken = new Set<number>();
    for (let i = 0; i < 1000; i += 1) {
      const key = ConnectionKey.draw((prefix) => !taken.has(prefix));
      expect(key.prefix).not.toBe(0);
      expect(taken.has(key.prefix)).toBe(false);
      taken.add(key.prefix);
    }
    expect(ConnectionKey.valid(1n << 56n)).toBe(false);
    expect(ConnectionKey.valid(0xffffn)).toBe(false);
    expect(ConnectionKey.valid(12345)).toBe(false);
  });
});

describe('control messages', () => {
  it('pack frames in order and unpack them back', () => {
    const frames = [{ kind: 4, call: 7, body: new Uint8Array([1, 2, 3]) }, { kind: 10, call: 0, body: new Uint8Array(0) }];
    const unpacked = unpackMessage(packMessage(frames));
    expect(unpacked.map((f) => [f.kind, f.call, [...frameBody(f)]])).toEqual([[4, 7, [1, 2, 3]], [10, 0, []]]);
  });

  it('write each header as kind u8, call u32 and length u32, big-endian (docs/wire.md)', () => {
    const body = Uint8Array.from({ length: 0x1234 }, (_, i) => i & 0xff);
    const packed = packMessage([{ kind: 9, call: 0x8765_4321, body }, { kind: 255, call: 1, body: new Uint8Array([7]) }]);
    expect([...packed.subarray(0, 9)]).toEqual([9, 0x87, 0x65, 0x43, 0x21, 0x00, 0x00, 0x12, 0x34]);
    expect([...packed.subarray(9, 9 + body.length)]).toEqual([...body]);
    expect([...packed.subarray(9 + body.length)]).toEqual([255, 0, 0, 0, 1, 0, 0, 0, 1, 7]);
    const [first] = unpackMessage(packed);
    expect([first!.kind, first!.call, first!.end - first!.start]).toEqual([9, 0x8765_4321, 0x1234]);
  });

  it('unpack only the first `length` bytes of a source, frames as ranges of it', () => {
    const one = packMessage([{ kind: 4, call: 7, body: new Uint8Array([1, 2, 3]) }]);
    const source = new Uint8Array(64).fill(0xee);
    source.set(one);
    const frames = unpackMessage(source, one.length);
    expect(frames.map((f) => [f.kind, f.call, f.start, f.end, f.source === source])).toEqual([[4, 7, 9, 12, true]]);
    // The bytes after `length` would be a frame header cut short.
    expect(codeOf(() => unpackMessage(source, one.length + 3))).toBe(Code.INVALID_ARGUMENT);
    expect(() => unpackMessage(source, 65)).toThrow(RangeError);
  });

  it('refuse an empty message and entries that run past the end', () => {
    expect(codeOf(() => unpackMessage(new Uint8Array(0)))).toBe(Code.INVALID_ARGUMENT);
    const whole = packMessage([{ kind: 4, call: 1, body: new Uint8Array(10) }]);
    expect(codeOf(() => unpackMessage(whole.subarray(0, 12)))).toBe(Code.INVALID_ARGUMENT);
    expect(codeOf(() => unpackMessage(whole.subarray(0, 5)))).toBe(Code.INVALID_ARGUMENT);
  });

  it(`take at most ${MAX_MESSAGE_FRAMES} frames in one message (gdrpc sends ${BATCH_FRAMES}); more make it malformed`, () => {
    const frames = (count: number) => packMessage(Array.from({ length: count }, (_, i) => ({ kind: 10, call: i, body: new Uint8Array(0) })));
    expect(unpackMessage(frames(MAX_MESSAGE_FRAMES)).length).toBe(MAX_MESSAGE_FRAMES);
    const error = (() => { try { unpackMessage(frames(MAX_MESSAGE_FRAMES + 1)); } catch (thrown) { return thrown as GdrpcError; } })();
    expect(error?.code).toBe(Code.INVALID_ARGUMENT);
    expect(error?.message).toMatch(`more than ${MAX_MESSAGE_FRAMES} frames in one message`);
  });
});

describe('frames', () => {
  it('round-trips a request with version, bigint and bytes', () => {
    const bytes = encodeFrame(FrameKind.Request, { svc: 's', m: 'm', a: { big: 1n << 60n, b: new Uint8Array([1, 2]) }, to: 5, md: { k: 'v' } });
    expect((packr.unpack(bytes) as { v: unknown }).v).toBe(WIRE_VERSION);
    const frame = decodeFrame(frameOf(FrameKind.Request, 1, bytes));
    if (frame.kind !== FrameKind.Request) throw new Error(`decoded as kind ${frame.kind}`);
    expect(frame.body.a?.big).toBe(1n << 60n);
    expect([...(frame.body.a as { b: Uint8Array }).b]).toEqual([1, 2]);
  });

  // encodeFrame appends `v` to the packed body instead of packing a copy that has it: the bytes
  // must be those the copy gave (what peers of earlier versions sent and read).
  it.each([
    ['an empty body', FrameKind.Ready, {}],
    ['a request', FrameKind.Request, { svc: 'a.b.S', m: 'm', a: { n: 1, big: 1n << 60n, s: 'x'.repeat(300), b: new Uint8Array(70_000).fill(3) }, to: 5, md: { k: 'v' } }],
    ['a body of 300 entries', FrameKind.Response, { r: Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`k${i}`, i])) }],
    ['integer-like keys', FrameKind.Response, { r: { 2: 'b', 1: 'a' } }],
  ] as const)('encodes %s as packing the body with v last', (_name, kind, body) => {
    const bytes = encodeFrame(kind, body as never);
    expect(Buffer.from(bytes).equals(packr.pack({ ...body, v: WIRE_VERSION }))).toBe(true);
    expect((decodeFrame(frameOf(kind, 1, bytes)).body as { v: unknown }).v).toBe(WIRE_VERSION);
  });

  it('decodes a frame in place from the middle of a source, its byte strings copied out', () => {
    const body = encodeFrame(FrameKind.Request, { svc: 's', m: 'm', a: { b: new Uint8Array([1, 2, 3]) } });
    const source = new Uint8Array(body.length + 20).fill(0xee);
    source.set(body, 10);
    const frame = decodeFrame({ kind: FrameKind.Request, call: 1, source, start: 10, end: 10 + body.length });
    if (frame.kind !== FrameKind.Request) throw new Error(`decoded as kind ${frame.kind}`);
    const bytes = (frame.body.a as { b: Uint8Array }).b;
    source.fill(0);  // the next message, received into the same buffer
    expect([...bytes]).toEqual([1, 2, 3]);
    expect(bytes.buffer).not.toBe(source.buffer);
  });

  it('refuses an empty body as not msgpack (not as the rest of its source)', () => {
    const source = packr.pack({ v: WIRE_VERSION });
    expect(codeOf(() => decodeFrame({ kind: FrameKind.Keepalive, call: 0, source, start: 0, end: 0 }))).toBe(Code.INVALID_ARGUMENT);
    expect(codeOf(() => decodeFrame({ kind: FrameKind.Keepalive, call: 0, source, start: 2, end: 2 }))).toBe(Code.INVALID_ARGUMENT);
    expect(decodeFrame({ kind: FrameKind.Keepalive, call: 0, source, start: 0, end: source.length }).kind).toBe(FrameKind.Keepalive);
  });

  it('keeps one v, the wire version, when a body brings its own', () => {
    const bytes = encodeFrame(FrameKind.Keepalive, { v: 99 } as never);
    expect(bytes).toEqual(packr.pack({ v: WIRE_VERSION }));
  });

  // Each kind's checks: test/wire/decode.test.ts.
  it('rejects unknown kinds, other versions and bytes that are not msgpack', () => {
    expect(codeOf(() => decodeFrame(frameOf(99, 0, packr.pack({ v: WIRE_VERSION }))))).toBe(Code.INVALID_ARGUMENT);
    expect(codeOf(() => decodeFrame(frameOf(FrameKind.Keepalive, 0, packr.pack({ v: 1 }))))).toBe(Code.INVALID_ARGUMENT);
    expect(codeOf(() => decodeFrame(frameOf(FrameKind.Keepalive, 0, new Uint8Array([0xc1]))))).toBe(Code.INVALID_ARGUMENT);
    expect(codeOf(() => checkTensorWire({ dt: 'u8', sh: [2], n: 2, mt: 'host', m: 'i', b: new Uint8Array(3) }, 'x'))).toBe(Code.INVALID_ARGUMENT);
    expect(codeOf(() => checkTensorWire({ dt: 'u8', sh: [2], n: 2, mt: 'host', m: 'r', x: 1 }, 'x'))).toBe(Code.INVALID_ARGUMENT);
  });
});

describe('validateFields', () => {
  // The arguments of p.Validation.check (test/schemas/rpc/validation.gdrpc).
  const { types } = ValidationDescriptor.methods.check;
  const fields = ValidationDescriptor.methods.check.args;
  const f32 = (...shape: number[]) => Tensor.fromArray(new Float32Array(shape.reduce((a, b) => a * b, 1)), { shape });

  it('accepts values that match, with symbols bound consistently across fields', () => {
    validateFields(fields, { x: f32(3, 5), blocks: [{ k: f32(3, 2) }], mode: 3, count: 2n ** 63n }, types, 'args');
  });

  it("binds a struct's symbols per struct value, apart from the method's", () => {
    validateFields(fields, { x: f32(3, 5), blocks: [{ k: f32(4, 2) }, { k: f32(1, 2) }], mode: 3, count: 1n }, types, 'args');
  });

  it('names the field for each kind of mismatch', () => {
    const ok = { x: f32(3, 5), blocks: [{ k: f32(3, 2) }], mode: 'B', count: 1n };
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ ...ok, x: Tensor.fromArray(new Uint8Array(15), { shape: [3, 5] }) }, /args\.x: dtype u8, declared f32/],
      [{ ...ok, x: f32(15) }, /args\.x: rank 1/],
      [{ ...ok, blocks: [{ k: f32(3, 3) }] }, /dimension 1 is 3, declared 2/],
      [{ ...ok, mode: 2 }, /args\.mode: .* is not a value of enum p\.Mode/],
      [{ ...ok, count: -1n }, /args\.count: -1n is out of range for u64 \(0 to 18446744073709551615\)/],
      [{ ...ok, count: 2n ** 64n }, /args\.count: 18446744073709551616n is out of range for u64/],
      [{ ...ok, note: 5 }, /args\.note: expected string/],
      [{ x: ok.x, blocks: ok.blocks, count: 1n }, /args\.mode is missing/],
    ];
    for (const [values, message] of cases) {
      let error: unknown;
      try { validateFields(fields, values, types, 'args'); } catch (e) { error = e; }
      expect(error).toBeInstanceOf(GdrpcError);
      expect((error as GdrpcError).code).toBe(Code.INVALID_ARGUMENT);
      expect((error as GdrpcError).message).toMatch(message);
    }
  });
});

describe('movers and paths', () => {
  const endpoint = (...transports: string[]): Endpoint => ({ transports: () => transports.map((transport) => ({ transport, device: 'x' })) }) as unknown as Endpoint;
  const limits = { inline: 4096, maxFrame: 1 << 20 };

  it("'auto' inlines small host tensors and zero bytes, tags the rest", () => {
    expect(chooseMover('auto', 0, 'cuda', limits).name).toBe('inline');
    expect(chooseMover('auto', 4096, 'host', limits).name).toBe('inline');
    expect(chooseMover('auto', 4097, 'host', limits).name).toBe('tag');
    expect(chooseMover('auto', 100, 'cuda', limits).name).toBe('tag');
    expect(chooseMover('auto', 64 << 20, 'cuda', limits).name).toBe('tag');
    expect(chooseMover('auto', 64 << 20, 'host', limits).name).toBe('tag');
    expect(chooseMover('rma', 100, 'host', limits).name).toBe('rma');
    expect(codeOf(() => chooseMover('inline', 2 << 20, 'host', limits))).toBe(Code.RESOURCE_EXHAUSTED);
  });

  it('names the path from the lanes and the memory types', () => {
    expect(transferPath('tag', endpoint('tcp', 'sysv'), 'host', 'host')).toBe('shm');
    expect(transferPath('tag', endpoint('tcp'), 'host', 'host')).toBe('tcp');
    expect(transferPath('rma', endpoint('rc_mlx5', 'tcp'), 'host', 'host')).toBe('rdma');
    expect(transferPath('tag', endpoint('cuda_ipc', 'sysv'), 'cuda', 'cuda')).toBe('cuda_ipc');
    expect(transferPath('tag', endpoint('rc_mlx5'), 'cuda', 'host')).toBe('rdma');
    expect(transferPath('tag', endpoint('tcp', 'sysv'), 'cuda', 'cuda')).toBe('staged');
    expect(transferPath('inline', endpoint('cuda_ipc'), 'cuda', 'host')).toBe('staged');
    expect(transferPath('inline', endpoint('tcp'), 'host', 'host')).toBe('inline');
    // Empty tensors move nothing: inline whatever the memory, so noStaging never refuses them.
    expect(transferPath('inline', endpoint('cuda_ipc'), 'cuda', 'cuda', 0)).toBe('inline');
    expect(transferPath('rma', endpoint('tcp'), 'cuda', 'host', 0)).toBe('inline');
    expect(transferPath('inline', endpoint('cuda_ipc'), 'cuda', 'cuda', 1)).toBe('staged');
  });

  it('reports RMA on GPU memory as cuda_ipc only when cuda_ipc GET is forced on', () => {
    const saved = process.env.UCX_CUDA_IPC_ENABLE_GET_ZCOPY;
    try {
      process.env.UCX_CUDA_IPC_ENABLE_GET_ZCOPY = 'y';
      expect(transferPath('rma', endpoint('cuda_ipc', 'sysv'), 'cuda', 'cuda')).toBe('cuda_ipc');
      expect(transferPath('rma', endpoint('tcp', 'sysv'), 'cuda', 'cuda')).toBe('staged');
      process.env.UCX_CUDA_IPC_ENABLE_GET_ZCOPY = 'auto';
      expect(transferPath('rma', endpoint('cuda_ipc', 'sysv'), 'cuda', 'cuda')).toBe('staged');
    } finally {
      if (saved === undefined) delete process.env.UCX_CUDA_IPC_ENABLE_GET_ZCOPY;
      else process.env.UCX_CUDA_IPC_ENABLE_GET_ZCOPY = saved;
    }
  });
});

describe('fields named after members of Object.prototype', () => {
  // What a schema may declare (helper 60): `struct Obj { toString: i32; isPrototypeOf: Mode?; }`.
  const types = { 'p.Mode': { kind: 'enum' as const, name: 'p.Mode', values: [{ name: 'A', value: 0 }] } };
  const fields = [
    { name: 'toString', type: { kind: 'scalar' as const, name: 'i32' as const } },
    { name: 'isPrototypeOf', type: { kind: 'optional' as const, inner: { kind: 'enum' as const, name: 'p.Mode' } } },
  ];

  it('are absent when an object leaves them out, not the prototype\'s functions (a missing required one was "got a function", a missing optional one refused)', () => {
    expect(() => validateFields(fields, { toString: 3 }, types, 'args')).not.toThrow();
    const missing = (() => { try { validateFields(fields, {}, types, 'args'); } catch (error) { return error as GdrpcError; } return undefined; })();
    expect(missing?.rawMessage).toBe('args.toString is missing');
    expect(encodeFields(fields, { toString: 3 }, types, () => undefined, '')).toEqual({ toString: 3 });
    expect(decodeFields(fields, { toString: 3 }, types, () => undefined, '')).toEqual({ toString: 3 });
    expect(decodeFields(fields, { toString: 3, isPrototypeOf: 0 }, types, () => undefined, '')).toEqual({ toString: 3, isPrototypeOf: 0 });
  });
});
