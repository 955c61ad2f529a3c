import { describe, expect, it } from 'vitest';
import { cuda } from '../../core/cuda.ts';
import { checkShape, parseDevice, parseTensorMeta, Tensor, tensorMeta } from '../../core/tensor/index.ts';
import { expectCode } from './expect-error.ts';

describe('shapes', () => {
  it.each([
    [[-1], /shape\[0\].*non-negative safe integer, got -1/],
    [[2, 1.5], /shape\[1\].*got 1.5/],
    [[Number.NaN], /got NaN/],
    [[Infinity], /got Infinity/],
    [[2 ** 53], /got 9007199254740992/],
    [['3'], /got "3"/],
    [[3n], /got 3n/],
  ])('rejects shape %s', (shape, message) => {
    expectCode(() => Tensor.empty(shape as number[], 'f32'), 'INVALID_ARGUMENT', message);
  });

  it('rejects a non-array shape', () => {
    expectCode(() => Tensor.empty(7 as any, 'u8'), 'INVALID_ARGUMENT', /expected an array/);
  });

  it('rejects shapes whose byte length is not a safe integer', () => {
    expectCode(() => checkShape([2 ** 20, 2 ** 20, 2 ** 11], 'f32'), 'INVALID_ARGUMENT', /byte length exceeds/);
    // numel alone is safe, bytes are not.
    expectCode(() => checkShape([2 ** 51], 'f64'), 'INVALID_ARGUMENT', /byte length exceeds/);
    expect(checkShape([2 ** 50], 'u8').byteLength).toBe(2 ** 50);
  });

  it('accepts zero-sized dimensions, whatever the other dimensions are', () => {
    expect(checkShape([2 ** 40, 2 ** 40, 0], 'f64')).toEqual({ shape: [2 ** 40, 2 ** 40, 0], numel: 0, byteLength: 0 });
    const t = Tensor.empty([3, 0], 'f32');
    expect(t.numel).toBe(0);
    expect(t.byteLength).toBe(0);
    expect(t.toArray().length).toBe(0);
  });

  it('treats [] as a scalar of one element', () => {
    const t = Tensor.zeros([], 'f64');
    expect(t.numel).toBe(1);
    expect(t.byteLength).toBe(8);
  });

  it('keeps its own frozen copy of the shape', () => {
    const shape = [2, 2];
    const t = Tensor.empty(shape, 'u8');
    shape[0] = 5;
    expect(t.shape).toEqual([2, 2]);
    expect(Object.isFrozen(t.shape)).toBe(true);
  });
});

describe('devices', () => {
  it.each(['gpu', 'cuda', 'cuda:', 'cuda:-1', 'cuda:01', 'CPU', 'cuda:1.0', 7])('rejects %j', (device) => {
    expectCode(() => parseDevice(device), 'INVALID_ARGUMENT', /expected 'cpu' or 'cuda:N'/);
    expectCode(() => Tensor.empty([1], 'u8', { device: device as any }), 'INVALID_ARGUMENT');
  });

  it('parses cpu and cuda:N', () => {
    expect(parseDevice('cpu')).toEqual({ kind: 'cpu' });
    expect(parseDevice('cuda:3')).toEqual({ kind: 'cuda', index: 3 });
  });

  it.skipIf(cuda.available())('refuses CUDA tensors without CUDA, saying why', () => {
    expectCode(() => Tensor.empty([4], 'f32', { device: 'cuda:0' }), 'FAILED_PRECONDITION', /CUDA is unavailable/);
  });
});

describe('zeros, empty, equals', () => {
  it('zeros() is all zero bytes', () => {
    const t = Tensor.zeros([3, 5], 'i32');
    expect(t.bytes().every((b) => b === 0)).toBe(true);
    expect(t.byteLength).toBe(60);
  });

  it('equals() compares dtype, shape and bytes', () => {
    const a = Tensor.fromArray(new Int16Array([1, 2, 3, 4]), { shape: [2, 2] });
    expect(a.equals(Tensor.fromArray(new Int16Array([1, 2, 3, 4]), { shape: [2, 2] }))).toBe(true);
    expect(a.equals(Tensor.fromArray(new Int16Array([1, 2, 3, 5]), { shape: [2, 2] }))).toBe(false);
    expect(a.equals(Tensor.fromArray(new Int16Array([1, 2, 3, 4]), { shape: [4] }))).toBe(false);
    expect(a.equals(Tensor.fromArray(new Int16Array([1, 2, 3, 4]), { shape: [1, 4] }))).toBe(false);
    expect(a.equals(Tensor.fromArray(new Uint16Array([1, 2, 3, 4]), { shape: [2, 2] }))).toBe(false);
    expect(Tensor.empty([0], 'f16').equals(Tensor.zeros([0], 'f16'))).toBe(true);
    expect(Tensor.empty([0], 'f16').equals(Tensor.zeros([0], 'bf16'))).toBe(false);
  });

  it("to('cpu') makes an independent copy", () => {
    const a = Tensor.fromArray(new Float32Array([1, 2, 3]));
    const b = a.to('cpu');
    expect(b.equals(a)).toBe(true);
    (b.toArray() as Float32Array)[0] = 9;
    expect((a.toArray() as Float32Array)[0]).toBe(1);
    expect(b.equals(a)).toBe(false);
  });

  it('release() is idempotent and makes the tensor unusable', () => {
    const t = Tensor.zeros([4], 'u8');
    t.release();
    t.release();
    expect(t.released).toBe(true);
    expectCode(() => t.bytes(), 'FAILED_PRECONDITION', /released/);
    expectCode(() => t.toArray(), 'FAILED_PRECONDITION', /released/);
    expectCode(() => t.to('cpu'), 'FAILED_PRECONDITION', /released/);
  });
});

describe('tensor meta', () => {
  it('describes a tensor as plain data', () => {
    const t = Tensor.zeros([2, 3], 'bf16');
    const meta = tensorMeta(t);
    expect(meta).toEqual({ dtype: 'bf16', shape: [2, 3], byteLength: 12, device: 'cpu' });
    expect(parseTensorMeta(structuredClone(meta))).toEqual(meta);
  });

  it.each([
    [null, /expected a tensor description/],
    [{ dtype: 'f7', shape: [1], byteLength: 1, device: 'cpu' }, /x\.dtype: unknown dtype/],
    [{ dtype: 'f32', shape: [-1], byteLength: 4, device: 'cpu' }, /x\.shape\[0\]/],
    [{ dtype: 'f32', shape: [2], byteLength: 4, device: 'cpu' }, /x\.byteLength: 4 does not match/],
    [{ dtype: 'f32', shape: [1], byteLength: 4, device: 'tpu' }, /x\.device/],
  ])('rejects %j from the wire', (value, message) => {
    expectCode(() => parseTensorMeta(value, 'x'), 'INVALID_ARGUMENT', message);
  });
});
