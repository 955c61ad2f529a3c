// What peer isolation costs (docs/security.md): the same client and server programs built from a
// baseline tree (before isolation: a checkout of an older commit with node_modules linked in and
// its own addon built from its own native/) and from this tree, run alternately in one session so that both see the same
// machine: small-call p50, 1 MiB and 64 MiB host tensor rates (tag mover, shared memory).
//   node --import tsx bench/isolation.ts --baseline /tmp/gdrpc-base --json bench/results/isolation.json
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describeMachine } from './machine.ts';

const args = process.argv.slice(2);
const option = (name: string): string | undefined => { const at = args.indexOf(name); return at >= 0 ? args[at + 1] : undefined; };
const baseline = option('--baseline');
const json = option('--json');
const rounds = Number(option('--rounds') ?? 3);
if (baseline === undefined) {
  console.error('usage: node --import tsx bench/isolation.ts --baseline <older gdrpc tree> [--json <file>] [--rounds N]');
  process.exit(2);
}
const current = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const client = resolve(current, 'bench/isolation-client.ts');

function run(file: string, argv: string[], env: NodeJS.ProcessEnv, until: RegExp): Promise<{ line: string; kill: () => void; done: Promise<void> }> {
  return new Promise((resolveRun, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', file, ...argv], { env: { ...process.env, ...env }, stdio: ['pipe', 'pipe', 'inherit'] });
    let out = '';
    const done = new Promise<void>((resolveDone) => child.on('exit', () => resolveDone()));
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`${file} did not print ${until} within 120 s`)); }, 120_000);
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
      const match = until.exec(out);
      if (match) { clearTimeout(timer); resolveRun({ line: match[0], kill: () => child.kill('SIGKILL'), done }); }
    });
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`${file} exited (${code}) before ${until}: ${out}`)); });
  });
}

async function measure(tree: string): Promise<Record<string, number>> {
  const server = await run(resolve(tree, 'test/rpc/fixtures/server-main.ts'), [], { GDRPC_TEST_SERVER: JSON.stringify({ poolBytes: 256 << 20, maxTensorBytes: 128 << 20 }) }, /LISTENING (\d+)/);
  try {
    const port = /LISTENING (\d+)/.exec(server.line)![1]!;
    const result = await run(client, [tree, port], {}, /RESULT (.*)\n/);
    return JSON.parse(/RESULT (.*)/.exec(result.line)![1]!) as Record<string, number>;
  } finally {
    server.kill();
    await server.done;
  }
}

const samples: Record<'baseline' | 'isolated', Array<Record<string, number>>> = { baseline: [], isolated: [] };
for (let round = 0; round < rounds; round += 1) {
  for (const [name, tree] of [['baseline', baseline], ['isolated', current]] as const) {
    const figures = await measure(tree);
    samples[name].push(figures);
    console.log(`round ${round + 1} ${name}: ${JSON.stringify(figures)}`);
  }
}
const median = (values: number[]): number => values.sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const summary: Record<string, { baseline: number; isolated: number; ratio: number }> = {};
for (const key of Object.keys(samples.baseline[0]!)) {
  const b = median(samples.baseline.map((s) => s[key]!));
  const i = median(samples.isolated.map((s) => s[key]!));
  summary[key] = { baseline: b, isolated: i, ratio: i / b };
}
console.table(summary);
const report = {
  machine: describeMachine(),
  what: 'peer isolation cost: same programs from a baseline tree and this tree, alternated in one run; medians over rounds',
  baseline, rounds, samples, summary,
  notes: 'ratio = isolated / baseline (latency: higher is slower; rates: lower is slower). Host memory between two processes on one machine, tag mover. Each tree runs its own addon build and its own UCX defaults.',
};
if (json !== undefined) {
  mkdirSync(dirname(json), { recursive: true });
  writeFileSync(json, JSON.stringify(report, null, 2) + '\n');
  console.log(`results written to ${json}`);
}
