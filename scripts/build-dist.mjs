#!/usr/bin/env node
// Builds the published JavaScript: tsc (tsconfig.build.json) emits ESM, declarations and source
// maps into dist/, then relative `.ts` specifiers left in the declarations become `.js`, so a
// consumer's compiler resolves them under any moduleResolution without allowImportingTsExtensions.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist');

let tsc;
try {
  // The package's exports hide bin/: resolve package.json and take the bin it names.
  const pkgJson = createRequire(join(root, 'package.json')).resolve('typescript/package.json');
  tsc = join(dirname(pkgJson), JSON.parse(readFileSync(pkgJson, 'utf8')).bin.tsc);
} catch {
  console.error('gdrpc build: typescript is not installed (it is a dev dependency: run `npm install` in the gdrpc checkout)');
  process.exit(1);
}
rmSync(dist, { recursive: true, force: true });
const r = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { stdio: 'inherit' });
if (r.status !== 0) {
  console.error(`gdrpc build: tsc failed (exit ${r.status ?? r.signal})`);
  process.exit(1);
}

// `from './x.ts'`, `import('./x.ts')` and `import './x.ts'` with a relative path.
const specifier = /((?:from|import)\s*\(?\s*['"])(\.{1,2}\/[^'"]*?)\.ts(['"])/g;
let files = 0;
function walk(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) walk(path);
    else if (entry.name.endsWith('.d.ts')) {
      const text = readFileSync(path, 'utf8');
      const next = text.replace(specifier, '$1$2.js$3');
      if (next !== text) { writeFileSync(path, next); files++; }
    }
  }
}
walk(dist);
console.log(`gdrpc build: dist/ written (${files} declaration files had .ts specifiers rewritten)`);
