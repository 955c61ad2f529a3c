// `npm run fuzz -- [--frames N] [--seed S] [--json file]`: the frame fuzzer of test/security for
// a long run (1,000,000 frames by default) against a server in another process, with a
// well-behaved client calling throughout; fails (exit 1) on a crash, a hang or a failed call.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { Client } from '../core/index.ts';
import { EchoDescriptor } from '../test/schemas/gen/rpc/echo.ts';
import { startServer } from '../test/rpc/fixtures/peers.ts';
import { disposePeers } from '../test/support/peer.ts';
import { serverStats } from '../test/rpc/fixtures/stats.ts';
import { fuzz } from '../test/security/fixtures/fuzzer.ts';
import { describeMachine } from './machine.ts';

const args = process.argv.slice(2);
const option = (name: string): string | undefined => { const at = args.indexOf(name); return at >= 0 ? args[at + 1] : undefined; };
const frames = Number(option('--frames') ?? 1_000_000);
const seed = Number(option('--seed') ?? Date.now() % 0x7fffffff);
const json = option('--json');

const server = await startServer({ poolBytes: 8 << 20, token: 'fuzz', transferTimeoutMs: 2000 });
const good = await Client.connect(server.address, { token: 'fuzz' });
const rssStart = (await serverStats(good)).rss;
let served = 0;
let failed: unknown;
let stop = false;
const steady = (async () => {
  while (!stop && failed === undefined) {
    try {
      await good.unary(EchoDescriptor.methods.ping, { n: served });
      served += 1;
    } catch (error) {
      failed = error;
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
})();
console.log(`fuzz: ${frames} frames, seed ${seed}`);
const result = await fuzz({ port: server.port, token: 'fuzz', service: EchoDescriptor.name, frames, seed });
stop = true;
await steady;
const alive = server.child.exitCode === null && server.child.signalCode === null;
const after = alive ? await serverStats(good).catch(() => undefined) : undefined;
const report = {
  machine: describeMachine(), seed, ...result, wellBehavedCalls: served,
  wellBehavedFailure: failed === undefined ? null : String(failed),
  serverAlive: alive, serverRssStartMiB: rssStart / 2 ** 20, serverRssEndMiB: after === undefined ? null : after.rss / 2 ** 20,
};
console.log(JSON.stringify(report, null, 2));
await good.close();
await disposePeers();
if (json !== undefined) {
  mkdirSync(dirname(json), { recursive: true });
  writeFileSync(json, JSON.stringify(report, null, 2) + '\n');
}
process.exit(alive && failed === undefined && after !== undefined ? 0 : 1);
