// The module's table of struct and enum declarations, the data-only service descriptors that
// point at it, and the validators, which hand a descriptor's fields to the runtime's
// validateFields.
import { escapeDoc } from './ts-types.ts';
import { StructureKind, VariableDeclarationKind, type StatementStructures } from 'ts-morph';
import type { EnumDescriptor, StructDescriptor, TypeTable } from '../../core/schema/descriptor.ts';
import type { IrFile, IrService } from '../model.ts';
import { literal, literalKey, quote, reference } from './literal.ts';
import { methodNames, MODULE_TYPES, serviceNames } from './naming.ts';
import type { ModuleSymbols } from './symbols.ts';

/** The declarations of one schema file's own structs and enums (not those it imports). */
export function ownTypes(file: IrFile): TypeTable {
  const table: TypeTable = {};
  for (const e of file.enums) {
    table[e.fullName] = { kind: 'enum', name: e.fullName, values: e.values.map((v) => ({ name: v.name, value: v.value })) } satisfies EnumDescriptor;
  }
  for (const s of file.structs) {
    table[s.fullName] = { kind: 'struct', name: s.fullName, fields: s.fields.map((f) => ({ name: f.name, type: f.type })) } satisfies StructDescriptor;
  }
  return table;
}

/**
 * The module's `types` constant: the tables of the modules it imports, spread, then its own
 * declarations. An imported declaration is written once, in its own module; spreading a module's
 * table brings what that module imports too, so every struct a field can reach is in it.
 */
export function typesStatement(file: IrFile, symbols: ModuleSymbols): StatementStructures {
  const spreads = file.imports.map((imported) => `  ...${symbols.moduleTypes(imported)},`);
  const own = Object.entries(ownTypes(file)).map(([name, decl]) => `  ${literalKey(name)}: ${literal(decl, '  ')},`);
  const lines = [...spreads, ...own];
  return {
    kind: StructureKind.VariableStatement,
    isExported: true,
    declarationKind: VariableDeclarationKind.Const,
    declarations: [{ name: MODULE_TYPES, type: symbols.runtime('TypeTable'), initializer: lines.length === 0 ? '{}' : `{\n${lines.join('\n')}\n}` }],
    docs: [`Struct and enum declarations of ${escapeDoc(file.path)}${file.imports.length > 0 ? ' and of the files it imports' : ''}, by fully qualified name; method descriptors carry it to the runtime.`],
  };
}

/** The descriptor constant and the validators of one service. */
export function descriptorStatements(service: IrService, symbols: ModuleSymbols): StatementStructures[] {
  const names = serviceNames(service);
  const methods = Object.fromEntries(service.methods.map((m) => [m.name, {
    name: m.name,
    service: service.fullName,
    args: m.args.map((f) => ({ name: f.name, type: f.type })),
    results: m.results.map((f) => ({ name: f.name, type: f.type })),
    clientStreaming: m.clientStreaming,
    serverStreaming: m.serverStreaming,
    types: reference(MODULE_TYPES),
  }]));
  const out: StatementStructures[] = [
    {
      kind: StructureKind.VariableStatement,
      isExported: true,
      declarationKind: VariableDeclarationKind.Const,
      declarations: [{ name: names.descriptor, initializer: `${literal({ name: service.fullName, methods })} satisfies ${symbols.runtime('ServiceDescriptor')}` }],
      docs: [`Data-only descriptor of ${service.fullName}: what the runtime routes, transfers and validates by.`],
    },
  ];
  const validateFields = symbols.runtime('validateFields', true);
  for (const m of service.methods) {
    const mn = methodNames(service, m);
    const validator = (name: string, list: 'args' | 'results', what: string): StatementStructures => ({
      kind: StructureKind.Function,
      isExported: true,
      name,
      parameters: [{ name: 'values', type: 'Record<string, unknown>' }],
      returnType: 'void',
      statements: [
        `${validateFields}(${names.descriptor}.methods.${m.name}.${list}, values, ${MODULE_TYPES}, ${quote(`${service.name}.${m.name} ${what}`)});`,
      ],
      docs: [`Checks ${what} of ${service.name}.${m.name} against the schema (dtype, rank, fixed and symbolic dimensions, missing fields); throws INVALID_ARGUMENT.`],
    });
    out.push(validator(mn.validateArgs, 'args', 'arguments'), validator(mn.validateResults, 'results', 'results'));
  }
  return out;
}
