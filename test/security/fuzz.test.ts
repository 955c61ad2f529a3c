// 100,000 fuzzed frames from a raw peer against a server in another process: valid frames,
// mutations of them, corrupted messages, guessed keys and stray tensor bytes. The server must not
// crash or hang, must keep serving a well-behaved client, and must end with nothing allocated.
// (`npm run fuzz` runs the same fuzzer for 1,000,000 frames.)
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from '../rpc/fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { expectPoolsEmpty, serverStats } from '../rpc/fixtures/stats.ts';
import { fuzz } from './fixtures/fuzzer.ts';

let server: ListeningPeer;
let good: Client;

beforeAll(async () => {
  server = await startServer({ poolBytes: 8 << 20, token: 'fuzz', transferTimeoutMs: 2000 });
  good = await Client.connect(server.address, { token: 'fuzz' });
});
afterAll(async () => {
  await good?.close();
  await disposePeers();
});

describe('fuzz', () => {
  it('100,000 random and mutated frames: no crash, no hang, still serving, nothing left allocated', async () => {
    const seed = Number(process.env.GDRPC_FUZZ_SEED ?? Date.now() % 0x7fffffff);
    console.log(`[fuzz] seed ${seed} (GDRPC_FUZZ_SEED replays it)`);
    // The well-behaved client calls throughout; every call must succeed.
    let served = 0;
    let stop = false;
    const steady = (async () => {
      while (!stop) {
        expect((await good.unary(EchoDescriptor.methods.ping, { n: served })).n).toBe(served);
        served += 1;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    const result = await fuzz({ port: server.port, token: 'fuzz', service: EchoDescriptor.name, frames: 100_000, seed });
    stop = true;
    await steady;
    console.log(`[fuzz] ${result.frames} frames in ${result.messages} messages, ${result.reconnects} reconnects, ${(result.ms / 1000).toFixed(1)} s; ${served} well-behaved calls served meanwhile`);
    expect(result.frames).toBeGreaterThanOrEqual(100_000);
    expect(served).toBeGreaterThan(0);
    expect(server.child.exitCode).toBeNull();
    expect(server.child.signalCode).toBeNull();
    expect((await good.unary(EchoDescriptor.methods.ping, { n: 1 })).n).toBe(1);
    await expectPoolsEmpty(good);
    await expect.poll(async () => (await serverStats(good)).activeCalls, { timeout: 15_000 }).toBe(1);
  }, 300_000);
});
