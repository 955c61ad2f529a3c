// Checks on names: reserved words, duplicates, generated names that would collide, and structs
// that contain themselves (they could never be built or sent).
import type { TypeRef } from '../core/schema/descriptor.ts';
import type { FieldNode, NameNode } from './ast.ts';
import type { DiagnosticBag } from './diagnostics.ts';
import { generatedNames, MODULE_TYPES, receivedName, RUNTIME_NAMES } from './emit/naming.ts';
import type { LoadedFile } from './loader.ts';
import { DTYPES, SCALARS } from './builtins.ts';
import type { PositionTable } from './lower.ts';
import { declIndex, type IrSchemaSet } from './model.ts';

/** Words of the schema language; no name may be one of them. */
export const KEYWORDS: ReadonlySet<string> = new Set([
  'package', 'import', 'struct', 'enum', 'service', 'rpc', 'stream', 'tensor', 'list', 'map', 'true', 'false',
]);

/** JavaScript reserved words: a struct, enum or service with one of these names cannot be emitted. */
const JS_RESERVED = new Set(
  ('break case catch class const continue debugger default delete do else export extends finally for function if ' +
    'import in instanceof new return super switch this throw try typeof var void while with yield let static ' +
    'implements interface package private protected public await null undefined any unknown never object symbol ' +
    'number bigint boolean string ' +
    // A type alias of these names does not parse (keyof, infer ...), and a strict-mode module
    // refuses to declare eval and arguments (found by a helper session's schemas).
    'as asserts infer is keyof readonly unique satisfies out eval arguments').split(' '),
);

/** Member names that would break the generated objects: prototype keys, and `then` (a client with
 * a `then` method is a thenable, so `await` would call it). */
const MEMBER_RESERVED = new Set(['__proto__', 'constructor', 'prototype']);

/** Members every object has (Object.prototype's): the descriptor's `methods` object would type
 *  such a key as the member it shadows, and the generated module does not compile. */
const OBJECT_MEMBERS = new Set(['hasOwnProperty', 'isPrototypeOf', 'propertyIsEnumerable', 'toLocaleString', 'toString', 'valueOf', '__defineGetter__', '__defineSetter__', '__lookupGetter__', '__lookupSetter__']);

/** Runs the name checks over all files. */
export function checkNames(files: LoadedFile[], diags: DiagnosticBag): void {
  for (const file of files) {
    const declNames = new Set(file.ast.decls.map((d) => d.name.text));
    for (const decl of file.ast.decls) {
      checkDeclName(decl.name, diags);
      if (decl.kind === 'struct') {
        checkFields(decl.fields, 'field', diags);
        if (declNames.has(receivedName(decl.name.text))) {
          diags.error(decl.name.pos, `'${receivedName(decl.name.text)}' is declared too, but it is the name generated for the receiving side of '${decl.name.text}'`);
        }
      } else if (decl.kind === 'enum') {
        unique(decl.values.map((v) => v.name), 'enum value', diags, (n) => checkMemberName(n, 'enum value', diags));
        const numbers = new Map<number, string>();
        for (const v of decl.values) {
          const previous = numbers.get(v.value);
          if (previous !== undefined) diags.error(v.name.pos, `enum value number ${v.value} is already used by '${previous}'`);
          else numbers.set(v.value, v.name.text);
          if (v.value > 0x7fffffff) diags.error(v.name.pos, `enum value number ${v.value} is above 2147483647`);
        }
      } else {
        unique(decl.methods.map((m) => m.name), 'method', diags, (n) => {
          checkMemberName(n, 'method', diags);
          if (n.text === 'then') diags.error(n.pos, "'then' is reserved as a method name: it would make the client a thenable");
          else if (n.text === 'new') diags.error(n.pos, "'new' is reserved as a method name: in the generated handler interface it would declare a constructor");
          else if (OBJECT_MEMBERS.has(n.text)) diags.error(n.pos, `'${n.text}' is reserved as a method name: a member of every object, the generated descriptor cannot type it`);
        });
        // Methods whose names differ in their first letter's case generate the same type names
        // (rpc foo and rpc Foo: SvcFooArgs twice).
        const byTypeName = new Map<string, string>();
        for (const m of decl.methods) {
          const typeName = m.name.text.charAt(0).toUpperCase() + m.name.text.slice(1);
          const other = byTypeName.get(typeName);
          if (other !== undefined && other !== m.name.text) diags.error(m.name.pos, `method '${m.name.text}' generates the same type names as method '${other}' (they differ in their first letter's case only)`);
          else byTypeName.set(typeName, m.name.text);
        }
        for (const m of decl.methods) {
          if (m.clientStreaming && m.serverStreaming) {
            diags.error(m.name.pos, `'${m.name.text}' streams both ways; the runtime has unary, server-streaming and client-streaming calls only`);
          }
          checkFields(m.args, 'argument', diags);
          checkFields(m.results, 'result', diags);
        }
      }
    }
    checkGeneratedCollisions(file, diags);
  }
}

function checkDeclName(name: NameNode, diags: DiagnosticBag): void {
  const n = name.text;
  if (KEYWORDS.has(n) || SCALARS.has(n) || DTYPES.has(n)) diags.error(name.pos, `'${n}' is a reserved word of the schema language`);
  else if (JS_RESERVED.has(n)) diags.error(name.pos, `'${n}' is reserved: it cannot name a generated TypeScript type`);
  else if (RUNTIME_NAMES.has(n)) diags.error(name.pos, `'${n}' is reserved: the generated module uses that name from the runtime`);
}

/** Words that a member (field, argument, result, method, enum value) may not be called: `stream`
 * would read as a streaming marker in an argument list. Other keywords are unambiguous there. */
const MEMBER_KEYWORDS = new Set(['stream']);

function checkMemberName(name: NameNode, what: string, diags: DiagnosticBag): void {
  const a = /^[aeiou]/.test(what) ? 'an' : 'a';
  if (MEMBER_KEYWORDS.has(name.text)) diags.error(name.pos, `'${name.text}' is a reserved word of the schema language and cannot name ${a} ${what}`);
  else if (MEMBER_RESERVED.has(name.text)) diags.error(name.pos, `'${name.text}' is reserved: it cannot name ${a} ${what}`);
}

function checkFields(fields: FieldNode[], what: string, diags: DiagnosticBag): void {
  unique(fields.map((f) => f.name), what, diags, (n) => checkMemberName(n, what, diags));
}

/** Reports the second and later uses of a name; `each` runs once per name node. */
function unique(names: NameNode[], what: string, diags: DiagnosticBag, each: (n: NameNode) => void): void {
  const seen = new Map<string, NameNode>();
  for (const n of names) {
    each(n);
    const previous = seen.get(n.text);
    if (previous) diags.error(n.pos, `duplicate ${what} '${n.text}' (first at line ${previous.pos.line})`);
    else seen.set(n.text, n);
  }
}

/** A declared name must not be one the emitter generates for the file or a service of it. */
function checkGeneratedCollisions(file: LoadedFile, diags: DiagnosticBag): void {
  const services = file.ast.decls.filter((d) => d.kind === 'service');
  const generated = new Map<string, string>();
  for (const s of services) {
    const names = generatedNames([{ name: s.name.text, methods: s.methods.map((m) => ({ name: m.name.text })) }]);
    for (const n of names) {
      if (n === s.name.text) continue;
      const owner = generated.get(n);
      if (owner !== undefined && owner !== s.name.text) diags.error(s.name.pos, `service '${s.name.text}' generates '${n}', which service '${owner}' generates too`);
      generated.set(n, s.name.text);
    }
  }
  for (const decl of file.ast.decls) {
    const owner = generated.get(decl.name.text);
    if (owner !== undefined) diags.error(decl.name.pos, `'${decl.name.text}' collides with a name generated for service '${owner}'; rename one of them`);
    else if (decl.name.text === MODULE_TYPES) diags.error(decl.name.pos, `'${MODULE_TYPES}' collides with the generated module's table of struct and enum declarations; rename it`);
  }
}

/** Reports structs that contain themselves through required fields (lists, maps and `?` break the loop). */
export function checkRecursion(ir: IrSchemaSet, positions: PositionTable, diags: DiagnosticBag): void {
  const index = declIndex(ir);
  const direct = (t: TypeRef): string[] => (t.kind === 'struct' ? [t.name] : []);
  for (const file of ir.files) {
    for (const struct of file.structs) {
      const seen = new Set<string>();
      const stack = struct.fields.flatMap((f) => direct(f.type));
      while (stack.length > 0) {
        const name = stack.pop()!;
        if (name === struct.fullName) {
          diags.error(positions.get(struct)!, `struct '${struct.name}' contains itself through required fields; make one of them optional ('T?') or a list`);
          break;
        }
        if (seen.has(name)) continue;
        seen.add(name);
        const target = index.get(name);
        if (target?.kind === 'struct' && 'fields' in target.decl) stack.push(...target.decl.fields.flatMap((f) => direct(f.type)));
      }
    }
  }
}
