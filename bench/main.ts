// `npm run bench -- <suite> [--json <file>] [suite flags]`: runs one benchmark suite and writes its
// results. Flags other than --json go to the suite (e.g. `load --seconds 10`).
import { writeFileSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';

/** What every suite is given: where its JSON goes, and the flags meant for it. */
interface SuiteOptions { json?: string; flags: string[] }

const suites: Record<string, () => Promise<(opts: SuiteOptions) => Promise<object>>> = {
  ucx: async () => (await import('./ucx.ts')).runUcxBench,
  rpc: async () => (await import('./rpc.ts')).runRpcBench,
  codegen: async () => (await import('./codegen.ts')).runCodegenBench,
  gpu: async () => (await import('./gpu.ts')).runGpuBench,
  load: async () => (await import('./load.ts')).runLoadBench,
  contention: async () => (await import('./load-contention.ts')).runContentionBench,
  'tp-mlp': async () => (await import('./tp-mlp.ts')).runTpMlpBench,
  'kv-blocks': async () => (await import('./kv-blocks.ts')).runKvBlocksBench,
  'wake-spin': async () => (await import('./wake-spin.ts')).runWakeSpinBench,
  'mem-events': async () => (await import('./mem-events.ts')).runMemEventsBench,
  poll: async () => (await import('./poll.ts')).runPollBench,
  'call-split': async () => (await import('./call-split.ts')).runCallSplitBench,
  'cuda-costs': async () => (await import('./cuda-costs.ts')).runCudaCostsBench,
  'warm-curve': async () => (await import('./warm-curve.ts')).runWarmCurveBench,
  'idle-gap': async () => (await import('./idle-gap.ts')).runIdleGapBench,
};

const [name, ...rest] = process.argv.slice(2);
const jsonAt = rest.indexOf('--json');
const json = jsonAt >= 0 ? rest[jsonAt + 1] : undefined;
const flags = jsonAt >= 0 ? [...rest.slice(0, jsonAt), ...rest.slice(jsonAt + 2)] : rest;
const load = name === undefined ? undefined : suites[name];
if (!load || (jsonAt >= 0 && !json)) {
  console.error(`usage: npm run bench -- <${Object.keys(suites).join('|')}> [--json <file>] [suite flags]`);
  process.exit(2);
}
const result = await (await load())(json === undefined ? { flags } : { json, flags });
if (json) {
  mkdirSync(dirname(json), { recursive: true });
  writeFileSync(json, JSON.stringify(result, null, 2) + '\n');
  console.log(`results written to ${json}`);
}
