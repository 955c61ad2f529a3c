// Checks values against the fields of a method descriptor. Used on both sides: the caller checks
// what it sends, the receiver checks the decoded header *before* allocating or running anything
// (tensors are then still descriptors that only carry dtype and shape).
import { fieldOf } from './values.ts';
import { Code, GdrpcError } from '../../errors.ts';
import type { Dim, DType, FieldDescriptor, ScalarName, TypeRef, TypeTable } from '../../schema/descriptor.ts';

/** Anything with a dtype and a shape: a Tensor, a RemoteTensor, or a tensor still on the wire. */
export interface TensorShaped { readonly dtype: DType | string; readonly shape: readonly number[] }

const INT_RANGES: Partial<Record<ScalarName, [number, number]>> = {
  i8: [-128, 127], i16: [-32768, 32767], i32: [-2147483648, 2147483647],
  u8: [0, 255], u16: [0, 65535], u32: [0, 4294967295],
};
const BIG_RANGES: Partial<Record<ScalarName, [bigint, bigint]>> = {
  i64: [-(1n << 63n), (1n << 63n) - 1n], u64: [0n, (1n << 64n) - 1n],
};
/** Largest finite f32. A finite number beyond it (past the rounding midpoint to the next power of
 *  two) would become Infinity when the receiver stores it as f32, so it is refused; NaN and
 *  ±Infinity are f32 values and pass, as they do for f64. */
const F32_MAX = 3.4028234663852886e38;

/** Validates arguments or results against a method's fields (dtype, rank, fixed and symbolic dims,
 *  missing fields, scalar types and ranges); throws GdrpcError INVALID_ARGUMENT naming the field.
 *  A dimension name binds within its scope (docs/schema.md): the method's own fields share one
 *  binding, and each struct value has its own (every element of a list<S> binds its names anew).
 *  `what` names the object ("Echo.echo arguments"); a field's path is appended to it. */
export function validateFields(fields: FieldDescriptor[], values: Record<string, unknown>, types: TypeTable, what: string): void {
  if (typeof values !== 'object' || values === null || Array.isArray(values)) {
    const names = fields.map((field) => field.name).join(', ');
    throw invalid(`${what}: expected an object with the fields { ${names} }, got ${describe(values)}`);
  }
  const symbols = new Map<string, { size: number; where: string }>();
  for (const field of fields) checkValue(field.type, fieldOf(values, field.name), `${what}.${field.name}`, types, symbols);
}

function checkValue(type: TypeRef, value: unknown, where: string, types: TypeTable, symbols: Map<string, { size: number; where: string }>): void {
  if (type.kind === 'optional') {
    if (value === undefined || value === null) return;
    checkValue(type.inner, value, where, types, symbols);
    return;
  }
  if (value === undefined) throw invalid(`${where} is missing`);
  switch (type.kind) {
    case 'scalar': return checkScalar(type.name, value, where);
    case 'tensor': return checkTensor(type.dtype, type.shape, value, where, symbols);
    case 'list':
      if (!Array.isArray(value)) throw invalid(`${where}: expected a list, got ${describe(value)}`);
      if (type.length !== undefined && value.length !== type.length) throw invalid(`${where}: expected a list of ${type.length}, got ${value.length}`);
      value.forEach((item, i) => checkValue(type.element, item, `${where}[${i}]`, types, symbols));
      return;
    case 'map': {
      const entries = value instanceof Map ? [...value.entries()] : isPlainObject(value) ? Object.entries(value) : undefined;
      if (entries === undefined) throw invalid(`${where}: expected a map, got ${describe(value)}`);
      for (const [key, item] of entries) {
        if (typeof key !== 'string') throw invalid(`${where}: map keys must be strings`);
        checkValue(type.value, item, `${where}[${JSON.stringify(key)}]`, types, symbols);
      }
      return;
    }
    case 'struct': {
      const struct = types[type.name];
      if (!isPlainObject(value)) throw invalid(`${where}: expected a ${type.name} object, got ${describe(value)}`);
      // A struct the table does not declare fails when the value is encoded or decoded (values.ts);
      // validateFields is public, and a caller checking one message may pass a partial table.
      if (struct?.kind !== 'struct') return;
      // A struct's dimension names are its own: they bind per value, not with the method's.
      const own = new Map<string, { size: number; where: string }>();
      for (const field of struct.fields) checkValue(field.type, fieldOf(value as Record<string, unknown>, field.name), `${where}.${field.name}`, types, own);
      return;
    }
    case 'enum': {
      const decl = types[type.name];
      if (decl?.kind !== 'enum') return;
      if (!decl.values.some((entry) => entry.value === value || entry.name === value)) {
        throw invalid(`${where}: ${describe(value)} is not a value of enum ${type.name}`);
      }
      return;
    }
  }
}

function checkScalar(name: ScalarName, value: unknown, where: string): void {
  const intRange = INT_RANGES[name];
  if (intRange) {
    if (typeof value !== 'number' || !Number.isInteger(value)) throw invalid(`${where}: expected ${name} (an integer), got ${describe(value)}`);
    if (value < intRange[0] || value > intRange[1]) throw outOfRange(where, value, name, `${intRange[0]} to ${intRange[1]}`);
    return;
  }
  const bigRange = BIG_RANGES[name];
  if (bigRange) {
    // 64-bit integers are bigint; a safe-integer number is accepted (msgpack sends small ones compactly).
    const big = typeof value === 'bigint' ? value : typeof value === 'number' && Number.isSafeInteger(value) ? BigInt(value) : undefined;
    if (big === undefined) {
      const unsafe = typeof value === 'number' && Number.isInteger(value);
      throw invalid(`${where}: expected ${name} as a bigint${unsafe ? ' (a number is exact only up to 2^53 - 1)' : ''}, got ${describe(value)}`);
    }
    if (big < bigRange[0] || big > bigRange[1]) throw outOfRange(where, `${big}n`, name, `${bigRange[0]} to ${bigRange[1]}`);
    return;
  }
  if (name === 'f32' || name === 'f64') {
    if (typeof value !== 'number') throw invalid(`${where}: expected ${name} (a number), got ${describe(value)}`);
    if (name === 'f32' && Number.isFinite(value) && !Number.isFinite(Math.fround(value))) {
      throw outOfRange(where, value, name, `finite f32 values lie within ±${F32_MAX}`);
    }
    return;
  }
  const ok = name === 'bool' ? typeof value === 'boolean' : name === 'string' ? typeof value === 'string' : value instanceof Uint8Array;
  if (!ok) throw invalid(`${where}: expected ${name}, got ${describe(value)}`);
}

function outOfRange(where: string, value: number | string, name: ScalarName, range: string): GdrpcError {
  return invalid(`${where}: ${value} is out of range for ${name} (${range})`);
}

function checkTensor(dtype: DType, dims: Dim[], value: unknown, where: string, symbols: Map<string, { size: number; where: string }>): void {
  if (!isTensorShaped(value)) throw invalid(`${where}: expected a tensor<${dtype}>, got ${describe(value)}`);
  if (value.dtype !== dtype) throw invalid(`${where}: dtype ${value.dtype}, declared ${dtype}`);
  if (value.shape.length !== dims.length) {
    throw invalid(`${where}: rank ${value.shape.length} (shape [${value.shape.join(', ')}]), declared rank ${dims.length}`);
  }
  dims.forEach((dim, axis) => {
    const size = value.shape[axis]!;
    if (dim.kind === 'fixed' && size !== dim.size) throw invalid(`${where}: dimension ${axis} is ${size}, declared ${dim.size}`);
    if (dim.kind === 'symbol') {
      const bound = symbols.get(dim.name);
      if (bound === undefined) symbols.set(dim.name, { size, where: `${where} dimension ${axis}` });
      else if (bound.size !== size) {
        throw invalid(`${where}: dimension ${axis} (${dim.name}) is ${size}, but ${bound.where} bound ${dim.name} = ${bound.size}`);
      }
    }
  });
}

/** True for objects that carry a dtype string and a shape array (tensors and tensor handles). */
export function isTensorShaped(value: unknown): value is TensorShaped {
  return typeof value === 'object' && value !== null && typeof (value as TensorShaped).dtype === 'string'
    && Array.isArray((value as TensorShaped).shape);
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (value instanceof Uint8Array) return 'bytes';
  if (typeof value === 'object') return isTensorShaped(value) ? `a tensor<${value.dtype}>` : 'an object';
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (value === undefined) return 'undefined';
  if (typeof value === 'function') return 'a function';
  return `${typeof value} ${String(value)}`;
}

function invalid(message: string): GdrpcError {
  return new GdrpcError(Code.INVALID_ARGUMENT, message);
}
