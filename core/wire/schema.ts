// The vocabulary of the frame table (frames.ts): the wire types a field can have, the check each
// one gets when it arrives from a peer, and the TypeScript type each one yields. The table is
// the one place a field is described: bodies are typed from it and checked against it.
import { ConnectionKey } from './tag.ts';

/** Wire types of frame and descriptor fields; WIRE_TYPE_NAMES gives the name docs/wire.md uses. */
export type WireType = 'uint' | 'key' | 'u64' | 'str' | 'bin' | 'bool' | 'map' | 'strmap' | 'uints';

/** One field of a frame body or tensor descriptor. */
export interface FieldSpec {
  readonly type: WireType;
  /** May be absent (nil counts as absent, and is removed from the decoded body). */
  readonly optional?: boolean;
  /** str: the only values accepted. */
  readonly oneOf?: readonly string[];
  /** bin: its byte length must equal this (uint) field of the same map. */
  readonly lengthIn?: string;
}

/** The fields of one map, by wire key. */
export type Fields = Readonly<Record<string, FieldSpec>>;

/** `spec` marked optional, its literal types kept (for the body types). */
export function optional<const F extends FieldSpec>(spec: F): F & { readonly optional: true } {
  return { ...spec, optional: true };
}

interface ValueOfType {
  uint: number; key: bigint; u64: bigint; str: string; bin: Uint8Array; bool: boolean;
  map: Record<string, unknown>; strmap: Record<string, string>; uints: number[];
}
type ValueOf<F extends FieldSpec> = F extends { readonly oneOf: readonly (infer V)[] } ? V : ValueOfType[F['type']];
type IsOptional<F> = F extends { readonly optional: true } ? true : false;
type Flat<T> = { [K in keyof T]: T[K] };

/** The TypeScript type of a map whose fields are `S` (what decoding `S` guarantees). */
export type BodyOf<S extends Fields> = Flat<
  { -readonly [K in keyof S as IsOptional<S[K]> extends true ? never : K]: ValueOf<S[K]> }
  & { -readonly [K in keyof S as IsOptional<S[K]> extends true ? K : never]?: ValueOf<S[K]> }
>;

/** How docs/wire.md writes each wire type in its tables. */
export const WIRE_TYPE_NAMES: Readonly<Record<WireType, string>> = {
  uint: 'uint', key: 'uint64', u64: 'uint64', str: 'str', bin: 'bin', bool: 'bool', map: 'map', strmap: 'map<str,str>', uints: 'uint[]',
};

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const isUint = (value: unknown): boolean => typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
/** Whether `value` is a msgpack map (not an array, not bytes). */
export const isMap = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);

// What a value of each type must be; `expected` completes "expected ...".
const CHECKS: Readonly<Record<WireType, { expected: string; accepts(value: unknown): boolean }>> = {
  uint: { expected: 'an integer from 0 to 2^53-1', accepts: isUint },
  key: { expected: 'a connection key (56 bits, top 24 not 0)', accepts: (value) => ConnectionKey.valid(value) },
  // 64-bit integers decode as bigint (codec.ts), so an address always arrives as one.
  u64: { expected: 'a uint64', accepts: (value) => typeof value === 'bigint' && value >= 0n && value < 1n << 64n },
  str: { expected: 'a string', accepts: (value) => typeof value === 'string' },
  bin: { expected: 'bytes', accepts: (value) => value instanceof Uint8Array },
  bool: { expected: 'a boolean', accepts: (value) => typeof value === 'boolean' },
  map: { expected: 'a map', accepts: isMap },
  strmap: { expected: 'a map of strings', accepts: (value) => isMap(value) && Object.values(value).every((v) => typeof v === 'string') },
  uints: { expected: 'an array of integers from 0 to 2^53-1', accepts: (value) => Array.isArray(value) && value.every(isUint) },
};

/** Why `map` does not match `fields` ("lacks 'x'", "has a bad 'x': ..."), or undefined when it
 *  does; nil optional fields are removed from `map` on the way. Keys not in `fields` are left. */
export function mismatch(fields: Fields, map: Record<string, unknown>): string | undefined {
  for (const name in fields) {
    const spec = fields[name]!;
    const value = map[name];
    if (value === undefined || value === null) {
      if (!spec.optional) return `lacks '${name}'`;
      // Only a key that is there is deleted: deleting keys that are not costs each frame time.
      if (value === null || Object.hasOwn(map, name)) delete map[name];
      continue;
    }
    // A uint another encoder wrote as a msgpack uint64 or int64 decodes as a bigint (keys must):
    // taken as the number it is when it is one (gdrpc itself writes such integers as float64).
    let checked: unknown = value;
    if (typeof value === 'bigint' && spec.type === 'uint') {
      if (value >= 0n && value <= MAX_SAFE) map[name] = checked = Number(value);
    } else if (spec.type === 'uints' && Array.isArray(value)) {
      for (let i = 0; i < value.length; i += 1) {
        const item: unknown = value[i];
        if (typeof item === 'bigint' && item >= 0n && item <= MAX_SAFE) value[i] = Number(item);
      }
    }
    const bad = badValue(spec, checked, map);
    if (bad !== undefined) return `has a bad '${name}': ${bad}`;
  }
  return undefined;
}

function badValue(spec: FieldSpec, value: unknown, map: Record<string, unknown>): string | undefined {
  const check = CHECKS[spec.type];
  if (!check.accepts(value)) return `expected ${check.expected}, got ${shown(value)}`;
  if (spec.oneOf !== undefined && !spec.oneOf.includes(value as string)) return `expected one of ${spec.oneOf.join(', ')}, got ${shown(value)}`;
  if (spec.lengthIn !== undefined && (value as Uint8Array).length !== map[spec.lengthIn]) {
    return `${(value as Uint8Array).length} bytes where '${spec.lengthIn}' says ${shown(map[spec.lengthIn])}`;
  }
  return undefined;
}

/** A short, bounded rendering of a peer's value for an error message. */
function shown(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  if (value instanceof Uint8Array) return `${value.length} bytes`;
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (typeof value === 'object') return 'a map';
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}...` : value);
  return typeof value === 'bigint' ? `${value}n` : String(value);
}
