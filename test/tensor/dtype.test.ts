import { describe, expect, it } from 'vitest';
import { DTYPES, elementSize, isDType, Tensor, type DType } from '../../core/tensor/index.ts';
import { expectCode } from './expect-error.ts';

// The expected view class and size of each dtype, written out independently of the implementation.
const EXPECTED: Record<DType, { view: Function; size: number; sample: (i: number) => number | bigint }> = {
  bool: { view: Uint8Array, size: 1, sample: (i) => i % 2 },
  u8: { view: Uint8Array, size: 1, sample: (i) => 250 + i },
  i8: { view: Int8Array, size: 1, sample: (i) => -100 - i },
  i16: { view: Int16Array, size: 2, sample: (i) => -30000 + i },
  u16: { view: Uint16Array, size: 2, sample: (i) => 65000 + i },
  i32: { view: Int32Array, size: 4, sample: (i) => -2_000_000_000 + i },
  u32: { view: Uint32Array, size: 4, sample: (i) => 4_000_000_000 + i },
  i64: { view: BigInt64Array, size: 8, sample: (i) => -(2n ** 62n) + BigInt(i) },
  u64: { view: BigUint64Array, size: 8, sample: (i) => 2n ** 63n + BigInt(i) },
  f16: { view: Uint16Array, size: 2, sample: (i) => 0x3c00 + i },   // raw half-precision bits
  bf16: { view: Uint16Array, size: 2, sample: (i) => 0x3f80 + i },  // raw bfloat16 bits
  f32: { view: Float32Array, size: 4, sample: (i) => 1.5 + i },
  f64: { view: Float64Array, size: 8, sample: (i) => Math.PI * (i + 1) },
};

function filled(dtype: DType, n: number): any {
  const { view, sample } = EXPECTED[dtype];
  const array = new (view as any)(n);
  for (let i = 0; i < n; i++) array[i] = sample(i);
  return array;
}

describe('dtypes', () => {
  it('lists exactly the thirteen dtypes of the schema language', () => {
    expect([...DTYPES].sort()).toEqual(Object.keys(EXPECTED).sort());
    expect(isDType('f16')).toBe(true);
    expect(isDType('float32')).toBe(false);
    expect(isDType('toString')).toBe(false);
  });

  it('rejects unknown dtypes with INVALID_ARGUMENT', () => {
    expectCode(() => elementSize('f8' as DType), 'INVALID_ARGUMENT', /unknown dtype "f8"/);
    expectCode(() => Tensor.empty([1], 'complex64' as DType), 'INVALID_ARGUMENT', /dtype/);
  });

  describe.each(DTYPES)('%s', (dtype) => {
    const { view, size } = EXPECTED[dtype];

    it('has the expected element size', () => {
      expect(elementSize(dtype)).toBe(size);
    });

    it('empty() gives a contiguous tensor viewed as its typed array', () => {
      const t = Tensor.empty([2, 3], dtype);
      expect(t.dtype).toBe(dtype);
      expect(t.shape).toEqual([2, 3]);
      expect(t.numel).toBe(6);
      expect(t.byteLength).toBe(6 * size);
      expect(t.device).toBe('cpu');
      const array = t.toArray();
      expect(array).toBeInstanceOf(view);
      expect(array.length).toBe(6);
      expect(t.bytes().byteLength).toBe(6 * size);
    });

    it('fromArray() views the data without copying and keeps values', () => {
      const data = filled(dtype, 5);
      const t = Tensor.fromArray(data, { dtype });
      expect(t.shape).toEqual([5]);
      expect(t.byteLength).toBe(5 * size);
      const array = t.toArray();
      expect(array).toBeInstanceOf(view);
      expect(Array.from(array as any)).toEqual(Array.from(data));
      data[1] = data[0];  // same memory: visible through the tensor
      expect((t.toArray() as any)[1]).toBe(data[0]);
      expect(t.bytes().buffer).toBe(data.buffer);
    });

    it('fromArray() takes a shape whose element count matches', () => {
      const t = Tensor.fromArray(filled(dtype, 6), { dtype, shape: [3, 1, 2] });
      expect(t.shape).toEqual([3, 1, 2]);
      expectCode(() => Tensor.fromArray(filled(dtype, 6), { dtype, shape: [4, 2] }), 'INVALID_ARGUMENT', /needs \d+ bytes, the array has/);
    });

    it('fromArray() reinterprets raw bytes as the dtype', () => {
      const source = filled(dtype, 4);
      const raw = new Uint8Array(source.buffer.slice(0));
      const t = Tensor.fromArray(raw, { dtype, shape: [2, 2] });
      expect(Array.from(t.toArray() as any)).toEqual(Array.from(source));
    });
  });

  it('infers the dtype from the typed array (16-bit unsigned is u16, not f16)', () => {
    expect(Tensor.fromArray(new Float32Array(2)).dtype).toBe('f32');
    expect(Tensor.fromArray(new Uint16Array(2)).dtype).toBe('u16');
    expect(Tensor.fromArray(new BigUint64Array(2)).dtype).toBe('u64');
    expect(Tensor.fromArray(new Uint8ClampedArray(2)).dtype).toBe('u8');
    expect(Tensor.fromArray(Buffer.from([1, 2, 3])).dtype).toBe('u8');
  });

  it('copies raw bytes that are misaligned for the dtype, so toArray() still works', () => {
    const backing = new Uint8Array(17);
    const view = new DataView(backing.buffer, 1);
    view.setFloat64(0, 0.25, true);  // typed arrays use the platform's order: little-endian on x86 and arm64
    view.setFloat64(8, 1.25, true);
    const t = Tensor.fromArray(backing.subarray(1), { dtype: 'f64' });
    expect(Array.from(t.toArray() as Float64Array)).toEqual([0.25, 1.25]);
    expect(t.bytes().buffer).not.toBe(backing.buffer);
  });

  it('rejects byte counts that are not whole elements, and non-typed-array data', () => {
    expectCode(() => Tensor.fromArray(new Uint8Array(6), { dtype: 'f32' }), 'INVALID_ARGUMENT', /not a whole number of f32/);
    expectCode(() => Tensor.fromArray(new DataView(new ArrayBuffer(4)) as any), 'INVALID_ARGUMENT', /typed array/);
    expectCode(() => Tensor.fromArray([1, 2, 3] as any), 'INVALID_ARGUMENT', /typed array/);
  });
});
