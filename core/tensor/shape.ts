// Shape validation shared by every constructor and by descriptors read off the wire: a shape
// is only accepted when its byte length is an exact JS number, so no later size arithmetic
// can silently round.
import { Code, GdrpcError } from '../errors.ts';
import { elementSize, type DType } from './dtype.ts';

/** A validated shape with its element count and byte length. */
export interface ShapeInfo {
  readonly shape: readonly number[];
  readonly numel: number;
  readonly byteLength: number;
}

/** Validates `shape` for `dtype`: non-negative safe integer dims, numel * elementSize a safe integer. */
export function checkShape(shape: unknown, dtype: DType, what = 'shape'): ShapeInfo {
  if (!Array.isArray(shape)) {
    throw new GdrpcError(Code.INVALID_ARGUMENT, `${what}: expected an array of dimensions, got ${describe(shape)}`);
  }
  const size = elementSize(dtype);
  const dims: number[] = [];
  let hasZero = false;
  for (let i = 0; i < shape.length; i++) {
    const dim: unknown = shape[i];
    if (typeof dim !== 'number' || !Number.isSafeInteger(dim) || dim < 0) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `${what}[${i}]: dimension must be a non-negative safe integer, got ${describe(dim)}`);
    }
    if (dim === 0) hasZero = true;
    dims.push(dim);
  }
  // A zero anywhere makes the tensor empty, however large the other dimensions are.
  let numel = hasZero ? 0 : 1;
  if (!hasZero) {
    for (const dim of dims) {
      numel *= dim;
      if (!Number.isSafeInteger(numel * size)) {
        throw new GdrpcError(Code.INVALID_ARGUMENT,
          `${what} [${dims.join(', ')}] of ${dtype}: byte length exceeds ${Number.MAX_SAFE_INTEGER}`);
      }
    }
  }
  return { shape: Object.freeze(dims), numel, byteLength: numel * size };
}

function describe(value: unknown): string {
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'number' || typeof value === 'boolean' || value === null || value === undefined) return String(value);
  if (typeof value === 'string') return JSON.stringify(value);
  return Array.isArray(value) ? 'an array' : typeof value;
}
