// Prints plain data (descriptors) as a TypeScript object literal: unquoted keys where possible,
// single-quoted strings, short objects on one line so that generated descriptors stay readable.
// A Reference in the data prints as the name of a constant, so data can point at shared data.

const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
const ONE_LINE = 96;

/** A constant of the generated module, written by name where it appears in printed data. */
export class Reference {
  constructor(readonly name: string) {}
}

/** Data that prints as `name`. */
export const reference = (name: string): Reference => new Reference(name);

/** The literal text of `value` (JSON-compatible data), indented as if it started at `indent`. */
export function literal(value: unknown, indent = ''): string {
  const flat = flatLiteral(value);
  if (flat.length + indent.length <= ONE_LINE || typeof value !== 'object' || value === null || value instanceof Reference) return flat;
  const inner = indent + '  ';
  if (Array.isArray(value)) {
    if (value.length === 0) return '[]';
    return `[\n${value.map((v) => `${inner}${literal(v, inner)},`).join('\n')}\n${indent}]`;
  }
  const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
  if (entries.length === 0) return '{}';
  return `{\n${entries.map(([k, v]) => `${inner}${property(k, v, literal(v, inner))},`).join('\n')}\n${indent}}`;
}

function flatLiteral(value: unknown): string {
  if (typeof value === 'string') return quote(value);
  if (typeof value !== 'object' || value === null) return String(value);
  if (value instanceof Reference) return value.name;
  if (Array.isArray(value)) return `[${value.map(flatLiteral).join(', ')}]`;
  const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
  if (entries.length === 0) return '{}';
  return `{ ${entries.map(([k, v]) => property(k, v, flatLiteral(v))).join(', ')} }`;
}

/** `key: text`, or just `key` for a reference to the constant of that name (`types` rather than `types: types`). */
function property(k: string, value: unknown, text: string): string {
  return value instanceof Reference && value.name === k ? k : `${literalKey(k)}: ${text}`;
}

/** A property name as written in an object literal: bare where it is an identifier. */
export const literalKey = (k: string): string => (IDENT.test(k) ? k : quote(k));

/** A single-quoted string literal. */
export function quote(s: string): string {
  return `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'").replace(/\n/g, '\\n')}'`;
}
