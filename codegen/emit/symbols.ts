// The import table of one generated module: which local name each referenced type has, and the
// import declarations that bring in types from other generated modules and from the runtime.
import path from 'node:path';
import type { ImportDeclarationStructure, OptionalKind } from 'ts-morph';
import type { IrFile } from '../model.ts';
import { MODULE_TYPES, receivedName } from './naming.ts';

/** Where each struct and enum of the set is declared. */
export type DeclOwners = ReadonlyMap<string, { file: IrFile; name: string }>;

/** The runtime package the generated code imports from. */
export const RUNTIME_MODULE = 'gdrpc';

/**
 * The extension of relative imports between generated modules. 'js' is what the TypeScript
 * compiler resolves under module node16/nodenext without allowImportingTsExtensions (it maps
 * `./x.js` to `./x.ts`), and what the emitted JavaScript loads; 'ts' suits projects that run
 * the sources directly and set allowImportingTsExtensions.
 */
export type ImportExtension = 'js' | 'ts';

/** Output path of a schema file's module: same relative path, `.ts` instead of `.gdrpc`. */
export function outputPath(schemaPath: string): string {
  return schemaPath.replace(/\.gdrpc$/, '') + '.ts';
}

/** Local names and imports of one generated module. */
export class ModuleSymbols {
  private readonly taken = new Set<string>();
  /** module specifier -> exported name -> { local name, used as a value somewhere }. */
  private readonly imports = new Map<string, Map<string, { local: string; value: boolean }>>();

  constructor(
    private readonly file: IrFile,
    private readonly owners: DeclOwners,
    localNames: Iterable<string>,
    private readonly importExtension: ImportExtension,
  ) {
    for (const n of localNames) this.taken.add(n);
  }

  /** The local name of a struct or enum (its receiving-side variant when `received`). */
  type(fullName: string, received = false): string {
    const owner = this.owners.get(fullName);
    if (!owner) throw new Error(`emitter: unknown type ${fullName}`);
    const exported = received ? receivedName(owner.name) : owner.name;
    if (owner.file === this.file) return exported;
    const spec = relativeSpecifier(this.file.path, owner.file.path, this.importExtension);
    return this.use(spec, exported, false);
  }

  /** The local name of the `types` constant of the module generated from `schemaPath`. */
  moduleTypes(schemaPath: string): string {
    return this.use(relativeSpecifier(this.file.path, schemaPath, this.importExtension), MODULE_TYPES, true);
  }

  /** The local name of a runtime export; `value` when the code uses it at run time. */
  runtime(name: string, value = false): string {
    return this.use(RUNTIME_MODULE, name, value);
  }

  private use(spec: string, exported: string, value: boolean): string {
    let names = this.imports.get(spec);
    if (!names) this.imports.set(spec, (names = new Map()));
    const known = names.get(exported);
    if (known) {
      known.value ||= value;
      return known.local;
    }
    let local = exported;
    // A name already used here (declared, or imported from elsewhere) gets a module-qualified alias.
    if (this.taken.has(local)) {
      const base = spec === RUNTIME_MODULE ? 'gdrpc' : path.posix.basename(spec).replace(/\.[jt]s$/, '').replace(/[^A-Za-z0-9_]/g, '_');
      // An identifier cannot start with a digit (a schema file 1common.gdrpc).
      const prefix = /^[0-9]/.test(base) ? `_${base}` : base;
      local = `${prefix}_${exported}`;
      for (let k = 2; this.taken.has(local); k++) local = `${prefix}_${exported}${k}`;
    }
    this.taken.add(local);
    names.set(exported, { local, value });
    return local;
  }

  /** Import declarations: the runtime first, then other modules by path; names sorted. */
  declarations(): OptionalKind<ImportDeclarationStructure>[] {
    const specs = [...this.imports.keys()].sort((a, b) => (a === RUNTIME_MODULE ? -1 : b === RUNTIME_MODULE ? 1 : a.localeCompare(b)));
    return specs.map((spec) => {
      const names = [...this.imports.get(spec)!.entries()].sort(([a], [b]) => a.localeCompare(b));
      const allTypes = names.every(([, n]) => !n.value);
      return {
        moduleSpecifier: spec,
        isTypeOnly: allTypes,
        namedImports: names.map(([exported, n]) => ({
          name: exported,
          alias: n.local === exported ? undefined : n.local,
          isTypeOnly: !allTypes && !n.value,
        })),
      };
    });
  }
}

function relativeSpecifier(from: string, to: string, extension: ImportExtension): string {
  const rel = path.posix.relative(path.posix.dirname(from), outputPath(to)).replace(/\.ts$/, `.${extension}`);
  return rel.startsWith('.') ? rel : `./${rel}`;
}
