// Shared by the codegen suites: where fixtures live and how one is compiled the way `gdrpc gen`
// compiles a directory.
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { compile, type CompileResult } from '../../codegen/compile.ts';

export const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '../..');
export const fixturesDir = path.join(here, 'fixtures');
export const errorsDir = path.join(here, 'errors');

/** Set GDRPC_UPDATE_GOLDEN=1 to rewrite expected files instead of comparing with them. */
export const updateGolden = process.env.GDRPC_UPDATE_GOLDEN === '1';

/** Sub-directories of `dir`, sorted. */
export function folders(dir: string): string[] {
  return readdirSync(dir).filter((n) => statSync(path.join(dir, n)).isDirectory()).sort();
}

/** Every .gdrpc file under `dir` (not under `expected/`), sorted. */
export function schemaFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const full = path.join(dir, name);
    if (statSync(full).isDirectory()) {
      if (name !== 'expected') out.push(...schemaFiles(full));
    } else if (name.endsWith('.gdrpc')) out.push(full);
  }
  return out;
}

/** Compiles a fixture directory with itself as the root, with diagnostics relative to the repository. */
export function compileFixture(dir: string): CompileResult {
  const cwd = process.cwd();
  process.chdir(repoRoot);
  try {
    return compile(schemaFiles(dir), { root: dir });
  } finally {
    process.chdir(cwd);
  }
}
