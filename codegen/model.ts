// The model: a language-neutral description of a set of schema files (the IR). Types use the
// descriptor's TypeRef with fully qualified names, so another language's emitter can read the
// JSON printed by `gdrpc gen --ir` without knowing anything about the parser.
import type { TypeRef } from '../core/schema/descriptor.ts';

/** Version of the IR JSON layout; bumped on incompatible changes. */
export const IR_VERSION = 1;

/** A field of a struct, or an argument or result of a method. */
export interface IrField {
  name: string;
  type: TypeRef;
  doc: string[];
}

/** A struct declaration. */
export interface IrStruct {
  name: string;
  /** package + '.' + name. */
  fullName: string;
  fields: IrField[];
  doc: string[];
}

/** An enum declaration with its explicit numbers. */
export interface IrEnum {
  name: string;
  fullName: string;
  values: Array<{ name: string; value: number; doc: string[] }>;
  doc: string[];
}

/** One rpc of a service. */
export interface IrMethod {
  name: string;
  args: IrField[];
  results: IrField[];
  clientStreaming: boolean;
  serverStreaming: boolean;
  doc: string[];
}

/** A service declaration. */
export interface IrService {
  name: string;
  fullName: string;
  methods: IrMethod[];
  doc: string[];
}

/** One schema file. `path` is relative to the compilation root, with '/' separators. */
export interface IrFile {
  path: string;
  package: string;
  /** Paths (relative to the root) of the files this one imports. */
  imports: string[];
  doc: string[];
  structs: IrStruct[];
  enums: IrEnum[];
  services: IrService[];
}

/** Everything one compiler run produced, in a stable order (input order, then import order). */
export interface IrSchemaSet {
  version: number;
  files: IrFile[];
}

/** A declaration that names a type. */
export type IrDecl = IrStruct | IrEnum;

/** Finds a struct or enum by fully qualified name across the set. */
export function declIndex(set: IrSchemaSet): Map<string, { decl: IrDecl; kind: 'struct' | 'enum'; file: IrFile }> {
  const index = new Map<string, { decl: IrDecl; kind: 'struct' | 'enum'; file: IrFile }>();
  for (const file of set.files) {
    for (const decl of file.structs) index.set(decl.fullName, { decl, kind: 'struct', file });
    for (const decl of file.enums) index.set(decl.fullName, { decl, kind: 'enum', file });
  }
  return index;
}
