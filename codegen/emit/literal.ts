// Prints plain data (descriptors) as a TypeScript object literal: unquoted keys where possible,
// single-quoted strings, short objects on one line so that generated descriptors stay readable.

const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
const ONE_LINE = 96;

/** The literal text of `value` (JSON-compatible data), indented as if it started at `indent`. */
export function literal(value: unknown, indent = ''): string {
  const flat = flatLiteral(value);
  if (flat.length + indent.length <= ONE_LINE || typeof value !== 'object' || value === null) return flat;
  const inner = indent + '  ';
  if (Array.isArray(value)) {
    if (value.length === 0) return '[]';
    return `[\n${value.map((v) => `${inner}${literal(v, inner)},`).join('\n')}\n${indent}]`;
  }
  const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
  if (entries.length === 0) return '{}';
  return `{\n${entries.map(([k, v]) => `${inner}${key(k)}: ${literal(v, inner)},`).join('\n')}\n${indent}}`;
}

function flatLiteral(value: unknown): string {
  if (typeof value === 'string') return quote(value);
  if (typeof value !== 'object' || value === null) return String(value);
  if (Array.isArray(value)) return `[${value.map(flatLiteral).join(', ')}]`;
  const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
  if (entries.length === 0) return '{}';
  return `{ ${entries.map(([k, v]) => `${key(k)}: ${flatLiteral(v)}`).join(', ')} }`;
}

const key = (k: string): string => (IDENT.test(k) ? k : quote(k));

/** A single-quoted string literal. */
export function quote(s: string): string {
  return `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'").replace(/\n/g, '\\n')}'`;
}
