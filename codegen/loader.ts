// Reads schema files and everything they import, and builds the import graph. Import paths are
// relative to the importing file; cycles are errors because the generated modules would import
// each other in a loop.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { FileNode } from './ast.ts';
import type { DiagnosticBag } from './diagnostics.ts';
import { parse } from './parser.ts';

/** A parsed schema file and the files its imports resolved to (in import order). */
export interface LoadedFile {
  /** Absolute path. */
  abs: string;
  /** Relative to the compilation root, '/' separated; also the base of the output file name. */
  rel: string;
  /** The name used in diagnostics (relative to the working directory). */
  display: string;
  source: string;
  ast: FileNode;
  imports: LoadedFile[];
}

/** Where sources come from; tests and the benchmark pass an in-memory one. */
export interface SourceHost {
  readFile(abs: string): string | undefined;
}

/** Reads schema files from disk. */
export const diskHost: SourceHost = {
  readFile(abs) {
    try {
      return readFileSync(abs, 'utf8');
    } catch {
      return undefined;
    }
  },
};

/** Loads `entries` (absolute paths) and their imports; returns files in discovery order. */
export function loadSchemas(entries: string[], root: string, diags: DiagnosticBag, host: SourceHost = diskHost): LoadedFile[] {
  const byAbs = new Map<string, LoadedFile>();
  const order: LoadedFile[] = [];

  const load = (abs: string): LoadedFile | undefined => {
    const known = byAbs.get(abs);
    if (known) return known;
    const source = host.readFile(abs);
    if (source === undefined) return undefined;
    const display = path.relative(process.cwd(), abs) || abs;
    const rel = path.relative(root, abs).split(path.sep).join('/');
    const file: LoadedFile = { abs, rel, display, source, ast: parse(display, source, diags), imports: [] };
    byAbs.set(abs, file);
    order.push(file);
    for (const imp of file.ast.imports) {
      const target = path.resolve(path.dirname(abs), imp.text);
      const loaded = load(target);
      if (!loaded) {
        diags.error(imp.pos, `cannot read imported file "${imp.text}" (${path.relative(process.cwd(), target)})`);
        continue;
      }
      file.imports.push(loaded);
      // Its module would be written outside the output directory.
      if (loaded.rel.startsWith('../') || path.isAbsolute(loaded.rel)) {
        diags.error(imp.pos, `imported file "${imp.text}" is outside the input directories (${path.relative(process.cwd(), root) || '.'}); pass its directory to gen as well`);
      }
    }
    return file;
  };

  for (const entry of entries) {
    if (!load(entry)) diags.error({ file: entry, line: 1, col: 1, offset: 0 }, 'cannot read schema file');
  }
  reportCycles(order, diags);
  return order;
}

/** Reports every import that closes a cycle, at the import statement, with the whole loop. */
function reportCycles(files: LoadedFile[], diags: DiagnosticBag): void {
  const state = new Map<LoadedFile, 'active' | 'done'>();
  const stack: LoadedFile[] = [];
  const visit = (file: LoadedFile): void => {
    state.set(file, 'active');
    stack.push(file);
    file.imports.forEach((target, k) => {
      const s = state.get(target);
      if (s === 'active') {
        const loop = [...stack.slice(stack.indexOf(target)), target].map((f) => f.rel).join(' -> ');
        const imp = file.ast.imports.find((i) => path.resolve(path.dirname(file.abs), i.text) === target.abs) ?? file.ast.imports[k]!;
        diags.error(imp.pos, `import cycle: ${loop}`);
      } else if (s === undefined) {
        visit(target);
      }
    });
    stack.pop();
    state.set(file, 'done');
  };
  for (const file of files) if (!state.has(file)) visit(file);
}
