// The language's own type names, and what a writer may have meant by a type name that is none
// (another language's spelling, a slip of case or a letter): the compiler's "did you mean".
import type { DType, ScalarName } from '../core/schema/descriptor.ts';
import { editDistance } from '../core/tensor/options.ts';

/** Scalar type names of the language. */
export const SCALARS: ReadonlySet<string> = new Set<ScalarName>([
  'bool', 'i8', 'i16', 'i32', 'i64', 'u8', 'u16', 'u32', 'u64', 'f32', 'f64', 'string', 'bytes',
]);

/** Tensor element types. */
export const DTYPES: ReadonlySet<string> = new Set<DType>([
  'bool', 'u8', 'i8', 'i16', 'u16', 'i32', 'u32', 'i64', 'u64', 'f16', 'bf16', 'f32', 'f64',
]);

/** Other languages' names for the language's types (compared without case). */
const SPELLED_ELSEWHERE: ReadonlyMap<string, string> = new Map([
  ['int', 'i32'], ['int8', 'i8'], ['int16', 'i16'], ['int32', 'i32'], ['int64', 'i64'], ['long', 'i64'],
  ['uint8', 'u8'], ['uint16', 'u16'], ['uint32', 'u32'], ['uint64', 'u64'], ['byte', 'u8'],
  ['float', 'f32'], ['float32', 'f32'], ['double', 'f64'], ['float64', 'f64'], ['number', 'f64'],
  ['boolean', 'bool'], ['str', 'string'], ['text', 'string'], ['blob', 'bytes'], ['buffer', 'bytes'],
  ['tensor', 'tensor<dtype, [dims]>'], ['array', 'list<T>'], ['vector', 'list<T>'], ['repeated', 'list<T>'],
  ['dict', 'map<string, V>'], ['record', 'map<string, V>'],
]);

/** What `name` may have meant among the scalars and `declared` (the names the file can see), in
 *  this order: a declaration of the same name but for case, a tensor of that element type (a
 *  dtype that is no scalar), another language's spelling, or a name within an edit (two from 6
 *  letters). */
export function meantType(name: string, declared: Iterable<string>): string | undefined {
  const lower = name.toLowerCase();
  const names = [...declared];
  const sameButCase = names.find((candidate) => candidate.toLowerCase() === lower);
  if (sameButCase !== undefined) return sameButCase;
  if (DTYPES.has(lower) && !SCALARS.has(lower)) return `tensor<${lower}, [dims]>`;
  const elsewhere = SPELLED_ELSEWHERE.get(lower);
  if (elsewhere !== undefined) return elsewhere;
  const limit = name.length >= 6 ? 2 : 1;
  let best: { name: string; distance: number } | undefined;
  for (const candidate of [...SCALARS, ...names]) {
    if (candidate === name) continue;
    const distance = candidate.toLowerCase() === lower ? 0 : editDistance(lower, candidate.toLowerCase(), limit);
    if (distance <= limit && (best === undefined || distance < best.distance)) best = { name: candidate, distance };
  }
  return best?.name;
}
