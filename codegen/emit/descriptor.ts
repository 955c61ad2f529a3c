// The data-only service descriptor (core/schema/descriptor.ts) and the validators, which hand the
// descriptor's fields to the runtime's validateFields.
import { StructureKind, VariableDeclarationKind, type StatementStructures } from 'ts-morph';
import type { EnumDescriptor, ServiceDescriptor, StructDescriptor, TypeRef } from '../../core/schema/descriptor.ts';
import type { IrEnum, IrService, IrStruct } from '../model.ts';
import { literal, quote } from './literal.ts';
import { methodNames, serviceNames } from './naming.ts';
import type { ModuleSymbols } from './symbols.ts';

/** Builds the descriptor data: methods, and every struct and enum they reach (imports included). */
export function serviceDescriptor(service: IrService, decls: ReadonlyMap<string, IrStruct | IrEnum>): ServiceDescriptor {
  const types: ServiceDescriptor['types'] = {};
  const reach = (t: TypeRef): void => {
    if (t.kind === 'list') reach(t.element);
    else if (t.kind === 'map') reach(t.value);
    else if (t.kind === 'optional') reach(t.inner);
    else if ((t.kind === 'struct' || t.kind === 'enum') && !(t.name in types)) {
      const decl = decls.get(t.name)!;
      if ('fields' in decl) {
        const struct: StructDescriptor = { kind: 'struct', name: decl.fullName, fields: [] };
        types[t.name] = struct;
        struct.fields = decl.fields.map((f) => ({ name: f.name, type: f.type }));
        decl.fields.forEach((f) => reach(f.type));
      } else {
        const values = decl.values.map((v) => ({ name: v.name, value: v.value }));
        types[t.name] = { kind: 'enum', name: decl.fullName, values } satisfies EnumDescriptor;
      }
    }
  };
  const methods: ServiceDescriptor['methods'] = {};
  for (const m of service.methods) {
    const field = (f: { name: string; type: TypeRef }) => ({ name: f.name, type: f.type });
    methods[m.name] = {
      name: m.name,
      service: service.fullName,
      args: m.args.map(field),
      results: m.results.map(field),
      clientStreaming: m.clientStreaming,
      serverStreaming: m.serverStreaming,
    };
    [...m.args, ...m.results].forEach((f) => reach(f.type));
  }
  return { name: service.fullName, methods, types };
}

/** The descriptor constant and the validators of one service. */
export function descriptorStatements(
  service: IrService, decls: ReadonlyMap<string, IrStruct | IrEnum>, symbols: ModuleSymbols,
): StatementStructures[] {
  const names = serviceNames(service);
  const data = serviceDescriptor(service, decls);
  const out: StatementStructures[] = [
    {
      kind: StructureKind.VariableStatement,
      isExported: true,
      declarationKind: VariableDeclarationKind.Const,
      declarations: [{ name: names.descriptor, initializer: `${literal(data)} satisfies ${symbols.runtime('ServiceDescriptor')}` }],
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
        `${validateFields}(${names.descriptor}.methods.${m.name}.${list}, values, ${names.descriptor}.types, ${quote(`${service.name}.${m.name} ${what}`)});`,
      ],
      docs: [`Checks ${what} of ${service.name}.${m.name} against the schema (dtype, rank, fixed and symbolic dimensions, missing fields); throws INVALID_ARGUMENT.`],
    });
    out.push(validator(mn.validateArgs, 'args', 'arguments'), validator(mn.validateResults, 'results', 'results'));
  }
  return out;
}
