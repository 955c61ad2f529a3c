// `npm run bench -- <suite> [--json <file>]`: runs one benchmark suite and writes its results.
import { writeFileSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';

const suites: Record<string, () => Promise<(opts: { json?: string }) => Promise<object>>> = {
  ucx: async () => (await import('./ucx.ts')).runUcxBench,
  rpc: async () => (await import('./rpc.ts')).runRpcBench,
  codegen: async () => (await import('./codegen.ts')).runCodegenBench,
  gpu: async () => (await import('./gpu.ts')).runGpuBench,
};

const [name, ...rest] = process.argv.slice(2);
const jsonAt = rest.indexOf('--json');
const json = jsonAt >= 0 ? rest[jsonAt + 1] : undefined;
const load = name === undefined ? undefined : suites[name];
if (!load || (jsonAt >= 0 && !json)) {
  console.error(`usage: npm run bench -- <${Object.keys(suites).join('|')}> [--json <file>]`);
  process.exit(2);
}
const result = await (await load())(json === undefined ? {} : { json });
if (json) {
  mkdirSync(dirname(json), { recursive: true });
  writeFileSync(json, JSON.stringify(result, null, 2) + '\n');
  console.log(`results written to ${json}`);
}
