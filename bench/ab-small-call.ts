// The small call of two checkouts side by side: `node --import tsx bench/ab-small-call.ts <treeA>
// <treeB> [rounds]` runs, for each round, a fresh pair of processes of each tree in turn (its own
// bench/rpc-gdrpc.ts system, adaptive polling, from TypeScript sources): warm-up until the call stops getting faster (bench/warm.ts), the
// p50 of 20,000 sequential calls, and calls/s over 2 s with 64 in flight. On these noisy machines
// only a difference larger than the spread between one tree's rows means anything.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { warmUp } from './warm.ts';

interface System { ping(): Promise<void>; close(): Promise<void> }

async function measure(tree: string): Promise<string> {
  const { gdrpcSystem } = await import(`${tree}/bench/rpc-gdrpc.ts`) as { gdrpcSystem: (busyPollUs: 'adaptive') => Promise<System> };
  const system = await gdrpcSystem('adaptive');
  try {
    await warmUp(() => system.ping());
    const times: number[] = [];
    for (let i = 0; i < 20_000; i += 1) {
      const started = performance.now();
      await system.ping();
      times.push(performance.now() - started);
    }
    times.sort((a, b) => a - b);
    const start = performance.now();
    let done = 0;
    await Promise.all(Array.from({ length: 64 }, async () => {
      while (performance.now() - start < 2000) {
        await system.ping();
        done += 1;
      }
    }));
    const rate = done / ((performance.now() - start) / 1000);
    return `p50 ${(times[times.length >> 1]! * 1000).toFixed(1)} us, 64 in flight ${Math.round(rate)} calls/s`;
  } finally {
    await system.close();
  }
}

const [first, second, third] = process.argv.slice(2);
if (first === '--one' && second !== undefined) {
  // A child's run: one tree, one line.
  console.log(await measure(second));
  process.exit(0);
}
const trees = [first, second];
if (trees.some((t) => t === undefined)) {
  console.error('usage: node --import tsx bench/ab-small-call.ts <treeA> <treeB> [rounds]');
  process.exit(2);
}
const self = fileURLToPath(import.meta.url);
for (let round = 0; round < Number(third ?? 3); round += 1) {
  for (const t of trees as string[]) {
    const line = execFileSync(process.execPath, ['--import', 'tsx', self, '--one', t], { cwd: t, encoding: 'utf8', timeout: 120_000 }).trim().split('\n').pop();
    console.log(`${t}: ${line}`);
  }
}
