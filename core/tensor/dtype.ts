// Element types: their sizes and the typed arrays that view them. Node 20 has no Float16Array,
// so the 16-bit float types are viewed as raw bits (Uint16Array); bool is one byte per element.
import { Code, GdrpcError } from '../errors.ts';
import type { DType } from '../schema/descriptor.ts';

export type { DType };

/** Any typed array a host tensor can be built from or viewed as. */
export type TypedArray =
  | Uint8Array | Uint8ClampedArray | Int8Array | Int16Array | Uint16Array | Int32Array | Uint32Array
  | BigInt64Array | BigUint64Array | Float32Array | Float64Array;

type ViewConstructor = {
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): TypedArray;
  readonly BYTES_PER_ELEMENT: number;
};

const VIEWS: Record<DType, ViewConstructor> = {
  bool: Uint8Array,
  u8: Uint8Array,
  i8: Int8Array,
  i16: Int16Array,
  u16: Uint16Array,
  i32: Int32Array,
  u32: Uint32Array,
  i64: BigInt64Array,
  u64: BigUint64Array,
  f16: Uint16Array,
  bf16: Uint16Array,
  f32: Float32Array,
  f64: Float64Array,
};

/** Every dtype, in the order of the schema language. */
export const DTYPES: readonly DType[] = Object.freeze(Object.keys(VIEWS) as DType[]);

/** True when `value` names a dtype. */
export function isDType(value: unknown): value is DType {
  return typeof value === 'string' && Object.hasOwn(VIEWS, value);
}

/** Throws INVALID_ARGUMENT unless `value` is a dtype. */
export function checkDType(value: unknown, what = 'dtype'): DType {
  if (!isDType(value)) {
    throw new GdrpcError(Code.INVALID_ARGUMENT, `${what}: unknown dtype ${JSON.stringify(value)} (expected one of ${DTYPES.join(', ')})`);
  }
  return value;
}

/** Bytes per element of `dtype`. */
export function elementSize(dtype: DType): number {
  return VIEWS[checkDType(dtype)].BYTES_PER_ELEMENT;
}

/** The typed-array class that views `dtype` (f16/bf16 as Uint16Array, bool as Uint8Array). */
export function viewClass(dtype: DType): ViewConstructor {
  return VIEWS[checkDType(dtype)];
}

/** A typed array of `dtype` over `length` elements of `buffer` from `byteOffset`; no copy. */
export function viewOf(dtype: DType, buffer: ArrayBufferLike, byteOffset: number, length: number): TypedArray {
  return new (viewClass(dtype))(buffer, byteOffset, length);
}

/** The dtype a typed array holds when nothing else is said (Uint16Array is u16, not f16). */
export function dtypeOfArray(data: ArrayBufferView): DType {
  if (data instanceof Uint8Array || data instanceof Uint8ClampedArray) return 'u8';
  if (data instanceof Int8Array) return 'i8';
  if (data instanceof Int16Array) return 'i16';
  if (data instanceof Uint16Array) return 'u16';
  if (data instanceof Int32Array) return 'i32';
  if (data instanceof Uint32Array) return 'u32';
  if (data instanceof BigInt64Array) return 'i64';
  if (data instanceof BigUint64Array) return 'u64';
  if (data instanceof Float32Array) return 'f32';
  if (data instanceof Float64Array) return 'f64';
  throw new GdrpcError(Code.INVALID_ARGUMENT, `cannot make a tensor from ${data?.constructor?.name ?? typeof data}: expected a typed array`);
}
