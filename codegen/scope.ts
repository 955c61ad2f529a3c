// The symbol and import table: every declared struct, enum and service by fully qualified name,
// and the names each file can see (its own declarations and those of the files it imports).
import type { DeclNode } from './ast.ts';
import type { DiagnosticBag, SourcePos } from './diagnostics.ts';
import type { LoadedFile } from './loader.ts';
import { meantType } from './builtins.ts';

/** A declaration and where it lives. */
export interface DeclSymbol {
  kind: DeclNode['kind'];
  name: string;
  fullName: string;
  file: LoadedFile;
  node: DeclNode;
}

/** Resolves type names written in a file to declarations, reporting unknown and duplicate names. */
export class Scope {
  private readonly byFullName = new Map<string, DeclSymbol>();

  constructor(
    files: LoadedFile[],
    private readonly diags: DiagnosticBag,
  ) {
    for (const file of files) {
      const pkg = packageOf(file);
      if (!file.ast.package) {
        diags.error({ file: file.display, line: 1, col: 1, offset: 0 }, "missing 'package' declaration (e.g. 'package my.service.v1;')");
      }
      for (const node of file.ast.decls) {
        const fullName = pkg ? `${pkg}.${node.name.text}` : node.name.text;
        const previous = this.byFullName.get(fullName);
        if (previous) {
          const where = previous.file === file ? '' : ` in ${previous.file.rel}`;
          diags.error(node.name.pos, `duplicate name '${node.name.text}': already declared${where} at line ${previous.node.name.pos.line}`);
          continue;
        }
        this.byFullName.set(fullName, { kind: node.kind, name: node.name.text, fullName, file, node });
      }
    }
  }

  /** The declaration that `name` (plain or package-qualified) means in `file`, or undefined after reporting. */
  resolve(file: LoadedFile, name: string, pos: SourcePos, quiet = false): DeclSymbol | undefined {
    const visible = [file, ...file.imports];
    const pkg = packageOf(file);
    const candidates = new Set<DeclSymbol>();
    for (const full of [name, pkg ? `${pkg}.${name}` : name]) {
      const sym = this.byFullName.get(full);
      if (sym && visible.includes(sym.file)) candidates.add(sym);
    }
    if (candidates.size === 0 && !name.includes('.')) {
      // A plain name may also mean a declaration of another package that this file imports.
      for (const sym of this.byFullName.values()) {
        if (sym.name === name && visible.includes(sym.file)) candidates.add(sym);
      }
    }
    if (candidates.size !== 1 && quiet) return undefined;
    if (candidates.size > 1) {
      const names = [...candidates].map((c) => c.fullName).join(', ');
      this.diags.error(pos, `ambiguous type '${name}': could be ${names}; write the qualified name`);
      return undefined;
    }
    const [sym] = candidates;
    if (!sym) {
      const elsewhere = [...this.byFullName.values()].find((s) => s.name === name || s.fullName === name);
      const meant = elsewhere === undefined ? meantType(name, [...this.byFullName.values()].filter((s) => s.kind !== 'service' && visible.includes(s.file)).map((s) => s.name)) : undefined;
      const hint = elsewhere ? ` (it is declared in ${elsewhere.file.rel}: add 'import "…";')` : meant !== undefined ? `: did you mean '${meant}'?` : '';
      this.diags.error(pos, `unknown type '${name}'${hint}`);
      return undefined;
    }
    return sym;
  }
}

/** The package name of a file, or '' when it has none (already reported). */
export function packageOf(file: LoadedFile): string {
  return file.ast.package?.text ?? '';
}
