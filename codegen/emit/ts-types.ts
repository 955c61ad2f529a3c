// Maps model types to TypeScript type text. A tensor with @remote placement is a `Tensor` on the
// sending side and a `RemoteTensor` (a handle to pull) on the receiving side, so every type that
// reaches one has two views.
import type { Placement, ScalarName, TypeRef } from '../../core/schema/descriptor.ts';
import type { IrField, IrStruct } from '../model.ts';
import type { ModuleSymbols } from './symbols.ts';

const SCALAR_TS: Record<ScalarName, string> = {
  bool: 'boolean',
  i8: 'number', i16: 'number', i32: 'number', u8: 'number', u16: 'number', u32: 'number', f32: 'number', f64: 'number',
  i64: 'bigint', u64: 'bigint',
  string: 'string',
  bytes: 'Uint8Array',
};

/** Answers whether a type reaches a @remote tensor (through structs, lists, maps, optionals). */
export class RemoteIndex {
  /** Per struct, whether it reaches one: worked out for all of them at once, on first use. */
  #table: Map<string, boolean> | undefined;

  constructor(private readonly structs: ReadonlyMap<string, IrStruct>) {}

  has(t: TypeRef): boolean {
    return this.#reaches(t, (name) => this.struct(name));
  }

  /** True when a struct has a different receiving-side view. */
  struct(fullName: string): boolean {
    this.#table ??= this.#reachability();
    return this.#table.get(fullName) ?? false;
  }

  fields(fields: IrField[]): boolean {
    return fields.some((f) => this.has(f.type));
  }

  #reaches(t: TypeRef, struct: (name: string) => boolean): boolean {
    switch (t.kind) {
      case 'tensor':
        return t.placement.kind === 'remote';
      case 'list':
        return this.#reaches(t.element, struct);
      case 'map':
        return this.#reaches(t.value, struct);
      case 'optional':
        return this.#reaches(t.inner, struct);
      case 'struct':
        return struct(t.name);
      default:
        return false;
    }
  }

  /** Every struct's answer, to a fixed point: a struct reaches a remote tensor when a field does,
   *  directly or through a struct that does. Worked out one struct at a time, with a struct met
   *  again inside a cycle taken as false and kept, the answer depended on the order of the
   *  declarations (A { b: B?; t @remote } B { a: A? }: B had no receiving view; helper 60). */
  #reachability(): Map<string, boolean> {
    const table = new Map<string, boolean>([...this.structs.keys()].map((name) => [name, false]));
    for (let changed = true; changed;) {
      changed = false;
      for (const [name, s] of this.structs) {
        if (table.get(name) === true) continue;
        if (s.fields.some((f) => this.#reaches(f.type, (other) => table.get(other) ?? false))) {
          table.set(name, true);
          changed = true;
        }
      }
    }
    return table;
  }
}

/** Writes TypeScript type text for model types, importing what they reference. */
export class TypeMapper {
  constructor(
    private readonly symbols: ModuleSymbols,
    private readonly remote: RemoteIndex,
  ) {}

  /** The TypeScript type of `t` as the sender (`received` false) or the receiver sees it. */
  type(t: TypeRef, received: boolean): string {
    switch (t.kind) {
      case 'scalar':
        return SCALAR_TS[t.name];
      case 'list': {
        const element = this.type(t.element, received);
        return /^[A-Za-z0-9_]+$/.test(element) ? `${element}[]` : `Array<${element}>`;
      }
      case 'map':
        return `Record<string, ${this.type(t.value, received)}>`;
      case 'optional':
        return `${this.type(t.inner, received)} | undefined`;
      case 'struct':
        return this.symbols.type(t.name, received && this.remote.struct(t.name));
      case 'enum':
        return this.symbols.type(t.name);
      case 'tensor':
        if (t.placement.kind !== 'remote') return this.symbols.runtime('Tensor');
        // A sender may pass on a handle it received instead of a tensor it owns.
        if (received) return this.symbols.runtime('RemoteTensor');
        return `${this.symbols.runtime('Tensor')} | ${this.symbols.runtime('RemoteTensor')}`;
    }
  }

  /** An object type literal with one property per field; optional fields may be left out. */
  object(fields: IrField[], received: boolean): string {
    if (fields.length === 0) return 'Record<string, never>';
    const lines = fields.map((f) => {
      // A tensor's dtype and shape are not in its TypeScript type: the schema type says them.
      const docLines = reachesTensor(f.type) ? [...f.doc, `Schema: \`${schemaType(f.type)}\``] : f.doc;
      const doc = docLines.length > 0 ? `${docComment(docLines, '  ')}\n` : '';
      const optional = f.type.kind === 'optional' ? '?' : '';
      return `${doc}  ${propertyName(f.name)}${optional}: ${this.type(f.type, received)};`;
    });
    return `{\n${lines.join('\n')}\n}`;
  }
}

function propertyName(name: string): string {
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(name) ? name : `'${name}'`;
}

/** A JSDoc block for doc lines written inside type text (ts-morph writes the top-level ones). */
export function docComment(lines: string[], indent: string): string {
  if (lines.length === 1) return `${indent}/** ${escapeDoc(lines[0]!)} */`;
  return [`${indent}/**`, ...lines.map((l) => `${indent} * ${escapeDoc(l)}`.trimEnd()), `${indent} */`].join('\n');
}

/** Keeps a doc line from closing the comment it is written into. */
export const escapeDoc = (line: string): string => commentLine(line).replace(/\*\//g, '*\\/');

/** `text` as one line of a comment: every line terminator JavaScript knows (CR, LF, U+2028,
 *  U+2029) becomes a space. A schema's doc or file name that kept one ended a `//` comment, and
 *  what followed it ran as code of the generated module (found by a helper session). */
export const commentLine = (text: string): string => text.replace(/[\r\n\u2028\u2029]/g, ' ');

function reachesTensor(t: TypeRef): boolean {
  if (t.kind === 'tensor') return true;
  if (t.kind === 'list') return reachesTensor(t.element);
  if (t.kind === 'map') return reachesTensor(t.value);
  if (t.kind === 'optional') return reachesTensor(t.inner);
  return false;
}

/** A type in schema syntax (sized dimension names are gone by now: they print as numbers). */
export function schemaType(t: TypeRef): string {
  switch (t.kind) {
    case 'scalar':
    case 'struct':
    case 'enum':
      return t.name;
    case 'list':
      return `list<${schemaType(t.element)}>`;
    case 'map':
      return `map<string, ${schemaType(t.value)}>`;
    case 'optional':
      // The placement follows the `?`: `tensor<f16, [n]>? @cuda`.
      return t.inner.kind === 'tensor' ? `${tensorCore(t.inner)}?${placementText(t.inner.placement)}` : `${schemaType(t.inner)}?`;
    case 'tensor':
      return `${tensorCore(t)}${placementText(t.placement)}`;
  }
}

function tensorCore(t: Extract<TypeRef, { kind: 'tensor' }>): string {
  const dims = t.shape.map((d) => (d.kind === 'fixed' ? String(d.size) : d.kind === 'symbol' ? d.name : '*'));
  return `tensor<${t.dtype}, [${dims.join(', ')}]>`;
}

function placementText(p: Placement): string {
  if (p.kind === 'cuda') return p.device === undefined ? ' @cuda' : ` @cuda(${p.device})`;
  return ` @${p.kind}`;
}
