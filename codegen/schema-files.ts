// Which schema files a `gen` run compiles: the inputs with directories expanded, and the root
// directory their output paths are relative to.
import { lstatSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';

/** Expands directories to the `.gdrpc` files under them (skipping the output directory); a
 *  string is the error to report. A directory reached through a symbolic link is not searched
 *  (a link to a directory above looped until ELOOP, one to a sibling compiled its files twice);
 *  a linked file is taken, and one whose link is broken is reported as unreadable. */
export function findSchemas(inputs: string[], outDir: string | undefined): string[] | string {
  const found: string[] = [];
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir).sort()) {
      const full = path.join(dir, name);
      if (name === 'node_modules' || name.startsWith('.') || full === outDir) continue;
      const entry = lstatSync(full, { throwIfNoEntry: false });
      if (entry?.isDirectory() === true) walk(full);
      else if (name.endsWith('.gdrpc') && entry !== undefined && (entry.isFile() || entry.isSymbolicLink())) found.push(full);
    }
  };
  for (const input of inputs) {
    let stat;
    try {
      stat = statSync(input);
    } catch {
      return `no such file or directory: ${path.relative(process.cwd(), input)}`;
    }
    if (stat.isDirectory()) walk(input);
    else found.push(input);
  }
  if (found.length === 0) return 'no .gdrpc files found';
  return found;
}

/** The directory output paths are relative to: the deepest directory holding every input. */
export function commonRoot(inputs: string[]): string {
  const dirs = inputs.map((p) => (statSync(p).isDirectory() ? p : path.dirname(p)));
  let root = dirs[0]!;
  while (!dirs.every((d) => d === root || d.startsWith(root + path.sep))) root = path.dirname(root);
  return root;
}
