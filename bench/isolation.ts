// What peer isolation costs (docs/security.md): the same client and server programs built from a
// baseline tree (before isolation: a checkout of an older commit with node_modules linked in and
// its own addon built from its own native/) and from this tree, run alternately in one session so that both see the same
// machine: small-call p50, 1 MiB and 64 MiB host tensor rates (tag mover, shared memory).
//   node --import tsx bench/isolation.ts --baseline /tmp/gdrpc-base --json bench/results/isolation.json
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describeMachine } from './machine.ts';
import { runPeer, spawnPeer } from '../test/support/peer.ts';
import { readyInfo } from '../test/support/ready-line.ts';

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

/** The ready info of the server: an older tree's server prints "LISTENING <port>" instead. */
function serverReady(line: string): Record<string, unknown> | undefined {
  const legacy = /^LISTENING (\d+)$/.exec(line);
  return legacy !== null ? { port: Number(legacy[1]) } : readyInfo(line);
}

async function measure(tree: string): Promise<Record<string, number>> {
  await using server = await spawnPeer<{ port: number }>(resolve(tree, 'test/rpc/fixtures/server-main.ts'), {
    env: { GDRPC_TEST_SERVER: JSON.stringify({ poolBytes: 256 << 20, maxTensorBytes: 128 << 20 }) }, readyTimeoutMs: 120_000, readyLine: serverReady,
  });
  const result = await runPeer(client, 120_000, { args: [tree, String(server.ready.port)] });
  const line = /RESULT (.*)/.exec(result.stdout)?.[1];
  if (line === undefined) throw new Error(`${client} printed no RESULT (${result.timedOut ? 'timed out' : `code ${result.code}`}): ${result.stdout}${result.stderr}`);
  return JSON.parse(line) as Record<string, number>;
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
