// Reads the import graph of the sources: static imports, re-exports and import('...') of relative
// paths. A regex over the text, not the compiler: TypeScript 7's API is not the one of TS 5, and
// an import specifier is a string literal after `from`, `import` or `import(`, which is enough.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/** One import: who imports, what, and whether only types cross. */
export interface ImportEdge { from: string; to: string; typeOnly: boolean; dynamic: boolean }

const STATIC = /^\s*(import|export)\s+(type\s+)?([^'";]*?)\s*from\s*['"]([^'"]+)['"]/gm;
const BARE = /^\s*import\s+['"]([^'"]+)['"]/gm;
const DYNAMIC = /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g;

/** Every .ts file under `dirs` (relative to `root`), as root-relative paths. */
export function sourceFiles(root: string, dirs: string[]): string[] {
  const out: string[] = [];
  const walk = (dir: string): void => {
    for (const name of readdirSync(join(root, dir))) {
      const path = join(dir, name);
      if (statSync(join(root, path)).isDirectory()) walk(path);
      else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(path);
    }
  };
  for (const d of dirs) walk(d);
  return out.sort();
}

function stripComments(text: string): string {
  // Block and line comments; keeps string literals (specifiers never contain `//` or `/*`).
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"])\/\/.*$/gm, '$1');
}

/** The relative imports of `files`, resolved to root-relative paths. */
export function importEdges(root: string, files: string[]): ImportEdge[] {
  const edges: ImportEdge[] = [];
  for (const file of files) {
    const text = stripComments(readFileSync(join(root, file), 'utf8'));
    const add = (spec: string, typeOnly: boolean, dynamic: boolean): void => {
      if (!spec.startsWith('.')) return;
      edges.push({ from: file, to: relative(root, resolve(root, dirname(file), spec)), typeOnly, dynamic });
    };
    for (const m of text.matchAll(STATIC)) {
      const clause = m[3]!;
      // `import { type A, type B }` carries only types as well as `import type`.
      const names = /^\{([\s\S]*)\}$/.exec(clause.trim())?.[1]?.split(',').map((s) => s.trim()).filter(Boolean);
      const typeOnly = m[2] !== undefined || (names !== undefined && names.length > 0 && names.every((n) => n.startsWith('type ')));
      add(m[4]!, typeOnly, false);
    }
    for (const m of text.matchAll(BARE)) add(m[1]!, false, false);
    for (const m of text.matchAll(DYNAMIC)) add(m[1]!, false, true);
  }
  return edges;
}

/** The strongly connected components with more than one file (or a file importing itself). */
export function cycles(edges: ImportEdge[]): string[][] {
  const next = new Map<string, string[]>();
  for (const e of edges) next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  let counter = 0;
  const visit = (v: string): void => {
    index.set(v, counter); low.set(v, counter); counter++;
    stack.push(v); onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!index.has(w)) { visit(w); low.set(v, Math.min(low.get(v)!, low.get(w)!)); }
      else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const scc: string[] = [];
      let w: string;
      do { w = stack.pop()!; onStack.delete(w); scc.push(w); } while (w !== v);
      if (scc.length > 1 || (next.get(v) ?? []).includes(v)) found.push(scc.sort());
    }
  };
  for (const v of new Set(edges.flatMap((e) => [e.from, e.to]))) if (!index.has(v)) visit(v);
  return found;
}

/** One loop through `scc`, written `a -> b -> ... -> a`, for a failure message. */
export function cyclePath(edges: ImportEdge[], scc: string[]): string {
  const inside = new Set(scc);
  const start = scc[0]!;
  const prev = new Map<string, string>([[start, '']]);
  const queue = [start];
  while (queue.length > 0) {
    const v = queue.shift()!;
    for (const e of edges) {
      if (e.from !== v || !inside.has(e.to)) continue;
      if (e.to === start) {
        const path = [start];
        for (let u = v; u !== start; u = prev.get(u)!) path.splice(1, 0, u);
        return [...path, start].join(' -> ');
      }
      if (!prev.has(e.to)) { prev.set(e.to, v); queue.push(e.to); }
    }
  }
  return scc.join(', ');
}
