// The compiler's passes in order: load and parse (with the import graph), symbol table, model,
// checks, optional evolution check against a baseline. Emitting is separate (emit/module.ts) so
// that `--ir` and the tests can stop after the model.
import { checkNames, checkRecursion } from './checks.ts';
import { DiagnosticBag } from './diagnostics.ts';
import { checkEvolution } from './evolution.ts';
import { loadSchemas, type LoadedFile, type SourceHost } from './loader.ts';
import { lower, type PositionTable } from './lower.ts';
import type { IrSchemaSet } from './model.ts';
import { Scope } from './scope.ts';

/** How to compile: the root output paths are relative to, where sources come from, a baseline. */
export interface CompileOptions {
  /** Directory that output paths (and IR paths) are relative to. */
  root: string;
  host?: SourceHost;
  /** A previous IR (from `--ir`): changes that would break a deployed peer are reported. */
  baseline?: IrSchemaSet;
}

/** What one compiler run produced. `ir` is only meaningful when `diags.hasErrors` is false. */
export interface CompileResult {
  ir: IrSchemaSet;
  files: LoadedFile[];
  positions: PositionTable;
  diags: DiagnosticBag;
  /** Source text by display name, for rendering diagnostics. */
  sources: Map<string, string>;
}

/** Compiles the schema files `entries` (absolute paths) and everything they import. */
export function compile(entries: string[], options: CompileOptions): CompileResult {
  const diags = new DiagnosticBag();
  const files = loadSchemas(entries, options.root, diags, options.host);
  const scope = new Scope(files, diags);
  const { ir, positions } = lower(files, scope, diags);
  checkNames(files, diags);
  checkRecursion(ir, positions, diags);
  if (options.baseline) checkEvolution(options.baseline, ir, positions, diags);
  const sources = new Map(files.map((f) => [f.display, f.source]));
  return { ir, files, positions, diags, sources };
}
