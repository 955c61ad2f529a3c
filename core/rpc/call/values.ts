// Walks argument and result objects along their descriptor types, turning tensors into wire
// descriptors on the way out and wire descriptors into placeholders on the way in (the bytes
// move afterwards, once the placeholders have been validated). Scalars are normalised here:
// 64-bit integers become bigint, enum names become their values.
import { Code, GdrpcError } from '../../errors.ts';
import type { FieldDescriptor, MethodDescriptor, Placement, TypeRef, TypeTable } from '../../schema/descriptor.ts';

const NO_TYPES: TypeTable = Object.freeze({});

/** The struct and enum declarations a method's fields are read with (none when it carries none). */
export function methodTypes(method: MethodDescriptor): TypeTable {
  return method.types ?? NO_TYPES;
}

/** Called for every tensor-typed value found while encoding; returns its wire descriptor. */
export type EncodeTensor = (value: unknown, where: string, placement: Placement) => unknown;
/** Called for every tensor-typed value found while decoding; returns the placeholder to store. */
export type DecodeTensor = (wire: unknown, where: string, placement: Placement) => unknown;

/** The field `name` of `object`, its own: a field a schema names after a member of
 *  Object.prototype (`toString`, `valueOf`) and an object leaves out is absent, not that member's
 *  function (a helper session's schema had a missing optional `isPrototypeOf` refused as "a
 *  function is not a value of enum"). No field's value is a function, so the check costs one
 *  typeof on every field and a lookup on none but those. */
export function fieldOf(object: Record<string, unknown>, name: string): unknown {
  const value = object[name];
  return typeof value === 'function' && !Object.hasOwn(object, name) ? undefined : value;
}

/** Encodes an object of fields for the wire. */
export function encodeFields(fields: FieldDescriptor[], values: Record<string, unknown>, types: TypeTable, onTensor: EncodeTensor, what: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const field of fields) {
    const value = fieldOf(values, field.name);
    if (value !== undefined) out[field.name] = encodeValue(field.type, value, types, onTensor, `${what}${field.name}`);
  }
  return out;
}

function encodeValue(type: TypeRef, value: unknown, types: TypeTable, onTensor: EncodeTensor, where: string): unknown {
  switch (type.kind) {
    case 'scalar': return value;
    case 'optional': return value === undefined || value === null ? null : encodeValue(type.inner, value, types, onTensor, where);
    case 'tensor': return onTensor(value, where, type.placement);
    case 'list': return (value as unknown[]).map((item, i) => encodeValue(type.element, item, types, onTensor, `${where}[${i}]`));
    case 'map': {
      const entries = value instanceof Map ? [...value.entries()] : Object.entries(value as object);
      return Object.fromEntries(entries.map(([key, item]) => [key, encodeValue(type.value, item, types, onTensor, `${where}[${JSON.stringify(key)}]`)]));
    }
    case 'struct': {
      const struct = types[type.name];
      if (struct?.kind !== 'struct') throw unknownType(type.name, where);
      return encodeFields(struct.fields, value as Record<string, unknown>, types, onTensor, `${where}.`);
    }
    case 'enum': {
      const decl = types[type.name];
      if (decl?.kind !== 'enum') throw unknownType(type.name, where);
      return typeof value === 'string' ? decl.values.find((entry) => entry.name === value)?.value ?? value : value;
    }
  }
}

/** Decodes a wire object of fields; tensors become whatever `onTensor` returns. Shape errors
 *  (a list that is not an array, ...) are INVALID_ARGUMENT; validateFields checks the rest. */
export function decodeFields(fields: FieldDescriptor[], wire: Record<string, unknown>, types: TypeTable, onTensor: DecodeTensor, what: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const field of fields) {
    const value = fieldOf(wire, field.name);
    if (value !== undefined && value !== null) out[field.name] = decodeValue(field.type, value, types, onTensor, `${what}${field.name}`);
  }
  return out;
}

function decodeValue(type: TypeRef, value: unknown, types: TypeTable, onTensor: DecodeTensor, where: string): unknown {
  switch (type.kind) {
    case 'scalar':
      if ((type.name === 'i64' || type.name === 'u64') && typeof value === 'number' && Number.isSafeInteger(value)) return BigInt(value);
      if (type.name === 'bytes' && value instanceof Uint8Array) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
      return value;
    case 'optional': return value === null ? undefined : decodeValue(type.inner, value, types, onTensor, where);
    case 'tensor': return onTensor(value, where, type.placement);
    case 'list':
      if (!Array.isArray(value)) throw new GdrpcError(Code.INVALID_ARGUMENT, `${where}: expected a list`);
      return value.map((item, i) => decodeValue(type.element, item, types, onTensor, `${where}[${i}]`));
    case 'map':
      if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new GdrpcError(Code.INVALID_ARGUMENT, `${where}: expected a map`);
      return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, decodeValue(type.value, item, types, onTensor, `${where}[${JSON.stringify(key)}]`)]));
    case 'struct': {
      const struct = types[type.name];
      if (struct?.kind !== 'struct') throw unknownType(type.name, where);
      if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new GdrpcError(Code.INVALID_ARGUMENT, `${where}: expected a ${type.name}`);
      return decodeFields(struct.fields, value as Record<string, unknown>, types, onTensor, `${where}.`);
    }
    case 'enum': return value;
  }
}

/** Replaces, in place, every value for which `map` returns something else (placeholders -> tensors). */
export function replaceDeep(value: unknown, map: (item: unknown) => unknown): unknown {
  const mapped = map(value);
  if (mapped !== value) return mapped;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i += 1) value[i] = replaceDeep(value[i], map);
  } else if (typeof value === 'object' && value !== null && Object.getPrototypeOf(value) === Object.prototype) {
    const record = value as Record<string, unknown>;
    for (const key of Object.keys(record)) record[key] = replaceDeep(record[key], map);
  }
  return value;
}

function unknownType(name: string, where: string): GdrpcError {
  return new GdrpcError(Code.INTERNAL, `${where}: the method descriptor's types do not declare ${name}`);
}
