// Reads schema files and everything they import, and builds the import graph. Import paths are
// relative to the importing file; cycles are errors because the generated modules would import
// each other in a loop.
import { readFileSync, statSync } from 'node:fs';
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

/** The largest schema file read (a schema of 3,000 structs is about 200 KB). */
export const MAX_SCHEMA_BYTES = 16 * 1024 * 1024;

/** Reads schema files from disk: regular files of MAX_SCHEMA_BYTES at most, nothing else (an
 *  import of /dev/zero took a compiler to 16.8 GB and an abort, one of /dev/stdin hung it). */
export const diskHost: SourceHost = {
  readFile(abs) {
    try {
      const stat = statSync(abs);
      if (!stat.isFile() || stat.size > MAX_SCHEMA_BYTES) return undefined;
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

  /** Reads and parses `abs`, first seen now; undefined when it cannot be read. */
  const open = (abs: string): LoadedFile | undefined => {
    const source = host.readFile(abs);
    if (source === undefined) return undefined;
    const display = path.relative(process.cwd(), abs) || abs;
    const rel = path.relative(root, abs).split(path.sep).join('/');
    const file: LoadedFile = { abs, rel, display, source, ast: parse(display, source, diags), imports: [] };
    byAbs.set(abs, file);
    order.push(file);
    return file;
  };

  /** `abs` and what it imports, depth first in import order, with a stack of its own (a chain of
   *  3,000 imports overflowed the call stack when this recursed). */
  const load = (abs: string): LoadedFile | undefined => {
    const known = byAbs.get(abs);
    if (known) return known;
    const first = open(abs);
    if (!first) return undefined;
    const stack: Array<{ file: LoadedFile; next: number }> = [{ file: first, next: 0 }];
    while (stack.length > 0) {
      const top = stack[stack.length - 1]!;
      const imp = top.file.ast.imports[top.next++];
      if (imp === undefined) {
        stack.pop();
        continue;
      }
      const target = path.resolve(path.dirname(top.file.abs), imp.text);
      // Its module would be written outside the output directory: refused before it is read (a
      // schema that imported /etc/passwd had it printed line by line as errors).
      const targetRel = path.relative(root, target);
      if (targetRel === '..' || targetRel.startsWith(`..${path.sep}`) || path.isAbsolute(targetRel)) {
        diags.error(imp.pos, `imported file "${imp.text}" is outside the input directories (${path.relative(process.cwd(), root) || '.'}); pass its directory to gen as well`);
        continue;
      }
      const known = byAbs.get(target);
      const loaded = known ?? open(target);
      if (!loaded) {
        diags.error(imp.pos, `cannot read imported file "${imp.text}" (${path.relative(process.cwd(), target)}): missing, or not a regular file of at most ${MAX_SCHEMA_BYTES >> 20} MiB`);
        continue;
      }
      top.file.imports.push(loaded);
      if (!known) stack.push({ file: loaded, next: 0 });
    }
    return first;
  };

  for (const entry of entries) {
    if (!load(entry)) diags.error({ file: entry, line: 1, col: 1, offset: 0 }, 'cannot read schema file');
  }
  reportCycles(order, diags);
  return order;
}

/** Reports every import that closes a cycle, at the import statement, with the whole loop.
 *  Walked with a stack of its own: a chain of 3,000 imports overflowed the call stack. */
function reportCycles(files: LoadedFile[], diags: DiagnosticBag): void {
  const state = new Map<LoadedFile, 'active' | 'done'>();
  const stack: LoadedFile[] = [];
  /** Per file on the stack, the index of its next import to look at. */
  const next: number[] = [];
  for (const start of files) {
    if (state.has(start)) continue;
    state.set(start, 'active');
    stack.push(start);
    next.push(0);
    while (stack.length > 0) {
      const file = stack[stack.length - 1]!;
      const k = next[next.length - 1]!;
      if (k >= file.imports.length) {
        stack.pop();
        next.pop();
        state.set(file, 'done');
        continue;
      }
      next[next.length - 1] = k + 1;
      const target = file.imports[k]!;
      const s = state.get(target);
      if (s === 'active') {
        const loop = [...stack.slice(stack.indexOf(target)), target].map((f) => f.rel).join(' -> ');
        const imp = file.ast.imports.find((i) => path.resolve(path.dirname(file.abs), i.text) === target.abs) ?? file.ast.imports[k]!;
        diags.error(imp.pos, `import cycle: ${loop}`);
      } else if (s === undefined) {
        state.set(target, 'active');
        stack.push(target);
        next.push(0);
      }
    }
  }
}
