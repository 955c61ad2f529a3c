// Where the gdrpc package lives on disk. Its modules run from core/ (sources, in this repository)
// or from dist/core/ (the published build); both find the package root by walking up to the
// first package.json, which is the one with the build/ folder the native addon is compiled into.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

let root: string | undefined;

/** The gdrpc package's root directory. */
export function packageRoot(): string {
  if (root !== undefined) return root;
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`gdrpc: no package.json above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
  root = dir;
  return root;
}
