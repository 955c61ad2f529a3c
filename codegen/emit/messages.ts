// Statements for the schema's own types: structs as object types (plus a receiving-side view when
// they hold remote tensors), enums as const objects with a union type, and each method's messages.
import { StructureKind, VariableDeclarationKind, type StatementStructures } from 'ts-morph';
import type { IrEnum, IrService, IrStruct } from '../model.ts';
import { methodNames, receivedName } from './naming.ts';
import { escapeDoc, type RemoteIndex, type TypeMapper } from './ts-types.ts';

/** ts-morph doc structures from doc lines (none when there are no lines). */
export function docs(lines: string[], fallback?: string): { docs?: string[] } {
  const text = lines.length > 0 ? lines.map(escapeDoc).join('\n') : fallback;
  return text === undefined ? {} : { docs: [text] };
}

/** A struct's type, and its receiving-side view when it reaches a remote tensor. */
export function structStatements(s: IrStruct, types: TypeMapper, remote: RemoteIndex): StatementStructures[] {
  const out: StatementStructures[] = [
    { kind: StructureKind.TypeAlias, isExported: true, name: s.name, type: types.object(s.fields, false), ...docs(s.doc) },
  ];
  if (remote.struct(s.fullName)) {
    out.push({
      kind: StructureKind.TypeAlias,
      isExported: true,
      name: receivedName(s.name),
      type: types.object(s.fields, true),
      docs: [`{@link ${s.name}} as the receiver sees it: remote tensors arrive as handles to pull.`],
    });
  }
  return out;
}

/** An enum as a const object of its numbers plus the union type of those numbers. */
export function enumStatements(e: IrEnum): StatementStructures[] {
  const members = e.values.map((v) => {
    const doc = v.doc.length > 0 ? `  /** ${v.doc.map(escapeDoc).join(' ')} */\n` : '';
    return `${doc}  ${v.name}: ${v.value},`;
  });
  return [
    {
      kind: StructureKind.VariableStatement,
      isExported: true,
      declarationKind: VariableDeclarationKind.Const,
      declarations: [{ name: e.name, initializer: `{\n${members.join('\n')}\n} as const` }],
      ...docs(e.doc),
    },
    { kind: StructureKind.TypeAlias, isExported: true, name: e.name, type: `(typeof ${e.name})[keyof typeof ${e.name}]` },
  ];
}

/** `<Service><Method>Args`/`Results` for every method, with `…Received` views where they differ. */
export function messageStatements(service: IrService, types: TypeMapper, remote: RemoteIndex): StatementStructures[] {
  const out: StatementStructures[] = [];
  for (const m of service.methods) {
    const names = methodNames(service, m);
    const alias = (name: string, type: string, doc: string): StatementStructures =>
      ({ kind: StructureKind.TypeAlias, isExported: true, name, type, docs: [doc] });
    const what = `${service.name}.${m.name}`;
    out.push(alias(names.args, types.object(m.args, false), `Arguments of ${what}${m.clientStreaming ? ' (one message of the stream)' : ''}.`));
    if (remote.fields(m.args)) out.push(alias(names.argsReceived, types.object(m.args, true), `Arguments of ${what} as the server receives them.`));
    out.push(alias(names.results, types.object(m.results, false), `Results of ${what}${m.serverStreaming ? ' (one message of the stream)' : ''}.`));
    if (remote.fields(m.results)) out.push(alias(names.resultsReceived, types.object(m.results, true), `Results of ${what} as the client receives them.`));
  }
  return out;
}
