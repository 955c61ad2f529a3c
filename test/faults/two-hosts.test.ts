// Two hosts: server and client in network namespaces joined by a veth pair, so that calls cross a
// real TCP path. Calls succeed across it, also over a slow link that drops packets; a link that
// goes down mid-transfer fails the call within the liveness time, and the server lets go of the
// dead connection by itself and serves again once the link is back.
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Code } from '../../core/errors.ts';
import type { ClientOptions, ServerOptions } from '../../core/index.ts';
import type { ServerStats } from '../rpc/fixtures/stats.ts';
import { HostClient } from './fixtures/host-calls.ts';
import type { Peer } from '../support/peer.ts';
import { networkSupport, TwoHosts, type Role } from './fixtures/netns.ts';

const support = networkSupport();
if (support.namespaces !== undefined) console.log(`[two-hosts] skipped: ${support.namespaces}`);
else if (support.shaping !== undefined) console.log(`[two-hosts] slow-link and link-down tests skipped: ${support.shaping}`);

const SERVER = new URL('../rpc/fixtures/server-main.ts', import.meta.url);
const CLIENT = new URL('./fixtures/host-client.ts', import.meta.url);
const MiB = 1 << 20;
// Peers start slowly on a loaded machine (tsx compiles, UCX initialises): hooks and tests get room.
const SLOW = 240_000;

/** Two hosts with the test server listening on the server host. */
interface Lab { hosts: TwoHosts; server: Peer<{ port: number }>; port: number }

async function startLab(options: ServerOptions): Promise<Lab> {
  const hosts = TwoHosts.create();
  try {
    // All addresses: the client reaches it over the veth, an observer on its own host over loopback.
    const server = await hosts.start<{ port: number }>('server', SERVER, { GDRPC_TEST_HOST: '0.0.0.0', GDRPC_TEST_SERVER: JSON.stringify(options) });
    return { hosts, server, port: server.ready.port };
  } catch (error) {
    await hosts.close();
    throw error;
  }
}

/** A host-client.ts process on `role`'s host: across the veth from the client host, over
 *  loopback from the server host (an observer that the veth's state does not affect). */
async function startClient(lab: Lab, role: Role, options: ClientOptions = {}): Promise<HostClient> {
  const address = role === 'client' ? `${lab.hosts.server.address}:${lab.port}` : `127.0.0.1:${lab.port}`;
  return new HostClient(await lab.hosts.start(role, CLIENT, { GDRPC_TEST_CLIENT: JSON.stringify({ address, options }) }));
}

async function serverStats(peer: HostClient): Promise<ServerStats> {
  const result = await peer.request({ op: 'stats' });
  expect(result, result.message).toMatchObject({ ok: true });
  return result.stats as ServerStats;
}

async function expectEcho(client: HostClient, size: number, seed: number): Promise<number> {
  const result = await client.request({ op: 'echo', size, seed });
  expect(result, result.message).toMatchObject({ ok: true, n: size, same: true });
  return result.ms;
}

describe.skipIf(support.namespaces !== undefined)('two hosts', () => {
  describe('across the veth', () => {
    let lab: Lab | undefined;
    let client: HostClient;
    beforeAll(async () => {
      lab = await startLab({});
      client = await startClient(lab, 'client');
    }, SLOW);
    afterAll(async () => { await lab?.hosts.close(); }, SLOW);

    it('small calls succeed', async () => {
      const results = await Promise.all(Array.from({ length: 100 }, (_, n) => client.request({ op: 'ping', n })));
      for (const [n, result] of results.entries()) expect(result, result.message).toMatchObject({ ok: true, n });
      expect((await serverStats(client)).runs.ping).toBeGreaterThanOrEqual(100);
    }, SLOW);

    // Empty, one byte, just past the inline limit (4 KiB), and rendezvous sizes.
    it.each([0, 1, 4097, MiB, 64 * MiB])('a %i-byte host tensor goes over and back intact', async (size) => {
      const before = lab!.hosts.traffic('server');
      const ms = await expectEcho(client, size, size % 251);
      const after = lab!.hosts.traffic('server');
      console.log(`[two-hosts] echo of ${size} bytes across the veth: ${ms.toFixed(1)} ms`);
      // The bytes took the veth both ways (not shared memory: each peer has its own IPC namespace).
      expect(after.rxBytes - before.rxBytes).toBeGreaterThanOrEqual(size);
      expect(after.txBytes - before.txBytes).toBeGreaterThanOrEqual(size);
    }, SLOW);
  });

  describe.skipIf(support.shaping !== undefined)('over a slow link', () => {
    // Each test shapes the link its own way: fresh hosts for each.
    let lab: Lab | undefined;
    beforeEach(async () => { lab = await startLab({ livenessMs: 60_000 }); }, SLOW);
    afterEach(async () => { await lab?.hosts.close(); lab = undefined; }, SLOW);

    it('calls succeed, with the bytes intact, though the link drops packets', async () => {
      const size = 16 * MiB;
      // A long liveness keeps this test about loss; the next one is about liveness on a slow link.
      const unshaped = await startClient(lab!, 'client', { livenessMs: 60_000 });
      const quietMs = await expectEcho(unshaped, size, 7);
      // No netem on this kernel: tbf's rate adds latency (queueing) and its small queue overflows
      // (loss) in both directions, so TCP has to retransmit.
      for (const role of ['client', 'server'] as const) lab!.hosts.shape(role, { rate: '100mbit', burst: '16kb', limit: '16kb' });
      const client = await startClient(lab!, 'client', { livenessMs: 60_000 });
      const pings = Promise.all(Array.from({ length: 20 }, (_, n) => client.request({ op: 'ping', n })));
      const shapedMs = await expectEcho(client, size, 8);
      for (const [n, result] of (await pings).entries()) expect(result, result.message).toMatchObject({ ok: true, n });
      const checksum = await client.request({ op: 'checksum', size, seed: 9 });
      expect(checksum, checksum.message).toMatchObject({ ok: true, n: size });
      expect(checksum.sum).toBe(checksum.expected);
      const up = lab!.hosts.shapingStats('client');
      const down = lab!.hosts.shapingStats('server');
      console.log(`[two-hosts] ${size / MiB} MiB echo: ${quietMs.toFixed(0)} ms unshaped, ${shapedMs.toFixed(0)} ms at 100 mbit; `
        + `tbf dropped ${up.dropped} of ${up.sentPackets + up.dropped} packets up, ${down.dropped} of ${down.sentPackets + down.dropped} down`);
      // The loss was real: packets were dropped on the way and the calls still came out right.
      expect(up.dropped + down.dropped).toBeGreaterThan(0);
    }, SLOW);

    it('a transfer that lasts longer than the liveness time succeeds while its bytes keep coming', async () => {
      const livenessMs = 3000;
      const size = 8 * MiB;
      const { hosts } = lab!;
      // About 7 s at 10 mbit, without loss: both peers are alive and the bytes flow throughout.
      hosts.shape('client', { rate: '10mbit', burst: '16kb', limit: '1mb' });
      const client = await startClient(lab!, 'client', { livenessMs });
      const result = await client.request({ op: 'checksum', size, seed: 3 });
      console.log(`[two-hosts] ${size / MiB} MiB upload at 10 mbit, liveness ${livenessMs} ms: ${result.ok ? 'OK' : result.code} after ${result.ms.toFixed(0)} ms`);
      expect(result, result.message).toMatchObject({ ok: true, n: size });
      expect(result.sum).toBe(result.expected);
    }, SLOW);
  });

  describe.skipIf(support.shaping !== undefined)('link down mid-transfer', () => {
    const livenessMs = 3000;
    // A loaded 2-core machine runs liveness timers late; this is slack, not a target.
    const slackMs = 5000;
    let lab: Lab | undefined;
    beforeAll(async () => { lab = await startLab({ livenessMs, poolBytes: 320 * MiB, maxTensorBytes: 512 * MiB }); }, SLOW);
    afterAll(async () => { await lab?.hosts.close(); }, SLOW);

    it('fails the call within the liveness time; the server drops the connection and recovers', async () => {
      const { hosts } = lab!;
      const observer = await startClient(lab!, 'server');
      const client = await startClient(lab!, 'client', { livenessMs });
      expect(await client.request({ op: 'ping', n: 1 })).toMatchObject({ ok: true, n: 1 });

      // Slowed (without loss) so that the 256 MiB upload surely is under way when the link goes.
      hosts.shape('client', { rate: '400mbit', burst: '256kb', limit: '4mb' });
      const before = hosts.traffic('server').rxBytes;
      const uploadId = client.nextId;
      const upload = client.request({ op: 'checksum', size: 256 * MiB, seed: 5 });
      await client.started(uploadId);
      await expect.poll(() => hosts.traffic('server').rxBytes - before, { timeout: 60_000, interval: 20 }).toBeGreaterThan(32 * MiB);
      hosts.setLink('client', false);
      const downAt = performance.now();
      // A call issued now, with a deadline shorter than the liveness time, ends on its deadline.
      const late = client.request({ op: 'ping', n: 2, deadlineMs: 1000 });

      const failed = await upload;
      const settleMs = performance.now() - downAt;
      const moved = hosts.traffic('server').rxBytes - before;
      const lateResult = await late;
      console.log(`[two-hosts] link down after ${(moved / MiB).toFixed(0)} MiB of 256: upload failed ${failed.code} after ${settleMs.toFixed(0)} ms `
        + `(liveness ${livenessMs} ms); the 1 s deadline call ended ${lateResult.code} after ${lateResult.ms.toFixed(0)} ms`);
      expect(failed, failed.message).toMatchObject({ ok: false, code: Code.UNAVAILABLE });
      expect(settleMs).toBeLessThan(livenessMs + slackMs);
      expect(moved).toBeLessThan(256 * MiB);
      expect(lateResult, lateResult.message).toMatchObject({ ok: false, code: Code.DEADLINE_EXCEEDED });

      // The server finds the silent connection dead by itself (the link is still down): only the
      // observer's connection remains, no call is left, the upload's pool block is back.
      await expect.poll(async () => (await serverStats(observer)).connections, { timeout: livenessMs + 30_000, interval: 100 }).toBe(1);
      console.log(`[two-hosts] the server dropped the dead connection ${(performance.now() - downAt).toFixed(0)} ms after the link went down`);
      await expect.poll(async () => {
        const stats = await serverStats(observer);
        return { activeCalls: stats.activeCalls, poolsEmpty: stats.pools.every((pool) => pool.used === 0), checksums: stats.runs.checksum ?? 0 };
      }, { timeout: 10_000, interval: 100 }).toEqual({ activeCalls: 1, poolsEmpty: true, checksums: 0 });

      // With the link back, the same client reconnects on its next call and a new one connects.
      hosts.setLink('client', true);
      expect(await client.request({ op: 'ping', n: 3 })).toMatchObject({ ok: true, n: 3 });
      const fresh = await startClient(lab!, 'client', { livenessMs });
      expect(await fresh.request({ op: 'ping', n: 4 })).toMatchObject({ ok: true, n: 4 });
      await expectEcho(fresh, MiB, 6);
      const after = await serverStats(fresh);
      expect(after.connections).toBe(3);
      expect(after.runs.checksum ?? 0).toBe(0);
    }, SLOW);
  });
});
