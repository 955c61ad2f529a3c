// Resolve hook of bench/on-dist.mjs: core/**/*.ts and codegen/**/*.ts resolve to their compiled
// dist/ twins where those exist (a missing twin leaves the source in place).
import { existsSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const compiled = /^(core|codegen)\/(.+)\.ts$/;

export async function resolve(specifier, context, nextResolve) {
  const resolved = await nextResolve(specifier, context);
  if (!resolved.url.startsWith('file:')) return resolved;
  const path = fileURLToPath(resolved.url);
  if (!path.startsWith(root)) return resolved;
  const match = compiled.exec(path.slice(root.length).replaceAll('\\', '/'));
  if (match === null) return resolved;
  const twin = `${root}dist/${match[1]}/${match[2]}.js`;
  return existsSync(twin) ? { ...resolved, url: pathToFileURL(twin).href, format: 'module' } : resolved;
}
