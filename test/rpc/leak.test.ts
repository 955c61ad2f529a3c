// 10,000 calls of every kind, then nothing left behind on either side: no pool bytes, no live
// tensors, no rkeys, no extra regions, endpoints or requests, no remote exposures.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, nativeStats, remoteExposures, serveRemoteTensors, shutdownOwner, type Tensor } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { expectPoolsEmpty, serverStats } from './fixtures/stats.ts';
import { patterned } from './fixtures/tensors.ts';

let server: ListeningPeer;
let client: Client;

beforeAll(async () => {
  server = await startServer({ poolBytes: 16 << 20 });
  client = await Client.connect(server.address, { poolBytes: 16 << 20 });
  serveRemoteTensors({ host: '127.0.0.1' });
});
afterAll(async () => {
  await client?.close();
  await shutdownOwner();
  await disposePeers();
});

describe('resource accounting', () => {
  it('10,000 calls leave no registration or memory behind', async () => {
    // Warm up so that lazily created pools and endpoints count as the baseline.
    for (const mover of ['inline', 'tag'] as const) {
      const r = await client.unary(EchoDescriptor.methods.echo, { x: patterned(20_000), tag: 'w' }, { mover });
      (r.y as Tensor).release();
    }
    const serverBefore = (await serverStats(client)).native;
    const clientBefore = nativeStats();
    const small = patterned(100);
    const medium = patterned(64 * 1024);
    const kinds = 8;
    const inFlight = 16;
    let issued = 0;
    async function worker(): Promise<void> {
      while (issued < 10_000) {
        const i = issued;
        issued += 1;
        switch (i % kinds) {
          case 0: await client.unary(EchoDescriptor.methods.ping, { n: i }); break;
          case 1: { const r = await client.unary(EchoDescriptor.methods.echo, { x: small, tag: 's' }); (r.y as Tensor).release(); break; }
          case 2: { const r = await client.unary(EchoDescriptor.methods.echo, { x: medium, tag: 't' }, { mover: 'tag' }); (r.y as Tensor).release(); break; }
          case 3: { const r = await client.unary(EchoDescriptor.methods.echo, { x: medium, tag: 'r' }, { mover: 'tag' }); (r.y as Tensor).release(); break; }
          case 4: await client.unary(EchoDescriptor.methods.sleep, { ms: 50 }, { deadline: 1 }).catch(() => {}); break;
          case 5: for await (const _ of client.serverStream(EchoDescriptor.methods.count, { upTo: 3, delayMs: 0 })) { /* drain */ } break;
          case 6: await client.clientStream(EchoDescriptor.methods.sum, [{ x: small }, { x: medium }]); break;
          case 7: if (i % 64 === 7) await client.unary(EchoDescriptor.methods.pullSum, { h: medium }); else await client.unary(EchoDescriptor.methods.checksum, { x: medium }, { mover: 'tag' }); break;
        }
      }
    }
    await Promise.all(Array.from({ length: inFlight }, () => worker()));
    expect(issued).toBeGreaterThanOrEqual(10_000);
    await expectPoolsEmpty(client);
    await expect.poll(async () => {
      const after = (await serverStats(client)).native;
      return [after.rkeys, after.regions, after.endpoints];
    }, { timeout: 10_000 }).toEqual([serverBefore.rkeys, serverBefore.regions, serverBefore.endpoints]);
    const clientAfter = nativeStats();
    expect(clientAfter.rkeys).toBe(clientBefore.rkeys);
    expect(clientAfter.regions).toBe(clientBefore.regions);
    expect(clientAfter.requests).toBeLessThanOrEqual(clientBefore.requests + 1);
    expect(remoteExposures()).toBe(0);
  }, 300_000);
});
