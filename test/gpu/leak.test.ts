// 1,000 calls with CUDA tensors must leave nothing behind: device memory in use (as the driver
// reports it, all processes together) back at its starting value once the client is closed, no
// UCX regions or rkeys left in either process, no per-call registrations, no exposed handles.
// The process's runtime and the source pool live across clients, as they would in a service.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { moverStats, nativeStats, remoteExposures, type Client, type RemoteTensor, type Tensor } from '../../core/index.ts';
import { openClientSide, type ClientSide } from './fixtures/client-side.ts';
import { announce, DRY_RUN, GPU_MOVERS, freeBytes, MiB, skipReason, topologies, type Topology } from './fixtures/env.ts';
import { fillTensor, firstMismatch } from './fixtures/pattern.ts';
import { startGpuServer, type GpuPeer } from './fixtures/peer.ts';
import { disposePeers } from '../support/peer.ts';
import type { ServerStats } from './fixtures/service.ts';

announce('test/gpu/leak.test.ts');

const CALLS = 1000;
const SIZE = MiB;
/** Slack for what the driver and UCX create lazily per endpoint (CUDA's allocation granule is
 *  2 MiB); one leaked tensor per call would be 1,000 MiB, one leaked pool 8 MiB or more. */
const SLACK = 4 * MiB;

afterAll(disposePeers);

/** Runs `calls` echo calls alternating tag and rma, pulling a handle every 20th call. */
async function work(side: ClientSide, client: Client, calls: number, x: Tensor, seed: number): Promise<void> {
  for (let i = 0; i < calls; i += 1) {
    const result = await client.unary(side.service.methods.echo, { x }, { mover: GPU_MOVERS[i % GPU_MOVERS.length]! });
    const y = result.y as Tensor;
    if (i % 100 === 0) expect(await firstMismatch(y, seed)).toBe(-1);
    y.release();
    if (i % 20 === 19) {
      const shared = await client.unary(side.service.methods.share, { n: SIZE, seed: 77 });
      const pulled = await (shared.h as RemoteTensor).pull({ pool: side.pool });
      pulled.release();
    }
  }
}

interface Snapshot { clientFree: number | undefined; server: ServerStats; native: ReturnType<typeof nativeStats>; oneOff: number }

describe.skipIf(skipReason !== undefined)(`no leaks after ${CALLS} calls`, () => {
  for (const topology of topologies) {
    describe(topology.name, () => {
      let server: GpuPeer;
      let side: ClientSide;

      beforeAll(async () => {
        server = await startGpuServer({ device: topology.server, poolBytes: 16 * MiB, ownPoolBytes: 16 * MiB });
        side = openClientSide(topology.client, 16 * MiB);
      }, 120_000);
      afterAll(async () => {
        await side?.close();
        server?.kill();
      });

      async function snapshot(): Promise<Snapshot> {
        return { clientFree: freeBytes(topology.client), server: await side.stats(server.address), native: nativeStats(), oneOff: moverStats().oneOffRegistrations };
      }

      /** A snapshot once closing endpoints and releases have finished: two in a row agree on every
       *  count and the server's receiving pools are empty (at most ~5 s). */
      async function settled(): Promise<Snapshot> {
        const key = (s: Snapshot): string => JSON.stringify([s.native, s.server.native, s.server.pools, s.server.own, s.clientFree, s.server.freeBytes]);
        let last = await snapshot();
        for (let i = 0; i < 50; i += 1) {
          await new Promise((resolve) => setTimeout(resolve, 100));
          const next = await snapshot();
          if (key(next) === key(last) && next.server.pools.every((pool) => pool.used === 0)) return next;
          last = next;
        }
        return last;
      }

      it(`device memory, registrations and handles are back after ${CALLS} calls (${describeTopology(topology)})`, async () => {
        const seed = 41;
        const x = side.pool.allocate([SIZE], 'u8');
        await fillTensor(x, seed);
        // Warm-up with a client of its own: CUDA contexts, UCX transports and caches come up here.
        const warm = await side.connect(server.address, { poolBytes: 8 * MiB });
        await work(side, warm, 40, x, seed);
        await warm.close();
        const before = await settled();

        const client = await side.connect(server.address, { poolBytes: 8 * MiB });
        await work(side, client, CALLS, x, seed);
        await client.close();
        x.release();
        // Arguments are released once results have left, endpoints close asynchronously.
        const after = await settled();
        console.log(`${topology.name}: free bytes client ${before.clientFree} -> ${after.clientFree}, ` +
          `server ${before.server.freeBytes} -> ${after.server.freeBytes}; server native ${JSON.stringify(after.server.native)}`);

        // Device memory: what the driver reports, all processes together.
        if (!DRY_RUN) {
          expect(Math.abs(after.clientFree! - before.clientFree!)).toBeLessThanOrEqual(SLACK);
          expect(Math.abs(after.server.freeBytes! - before.server.freeBytes!)).toBeLessThanOrEqual(SLACK);
        }
        // Server: pools empty, no handle exposed, no one-off registrations, no UCX regions or rkeys gained.
        expect(after.server.pools.every((pool) => pool.used === 0 && pool.liveTensors === 0 && pool.overflowRegistrations === 0)).toBe(true);
        expect(after.server.own.liveTensors).toBe(1);  // the one shared tensor, long-lived by design
        expect(after.server.remoteExposures).toBe(0);
        expect(after.server.oneOffRegistrations).toBe(before.server.oneOffRegistrations);
        expect(after.server.native.regions).toBe(before.server.native.regions);
        expect(after.server.native.rkeys).toBe(before.server.native.rkeys);
        expect(after.server.native.endpoints).toBe(before.server.native.endpoints);
        // Client: the same, and the source pool empty again.
        expect(after.oneOff).toBe(before.oneOff);
        expect(after.native.regions).toBe(before.native.regions);
        expect(after.native.rkeys).toBe(before.native.rkeys);
        expect(after.native.endpoints).toBe(before.native.endpoints);
        expect(remoteExposures()).toBe(0);
        expect(side.pool.stats()).toMatchObject({ used: 0, liveTensors: 0 });
      }, 240_000);
    });
  }
});

function describeTopology(topology: Topology): string {
  return topology.client === topology.server ? `both on ${topology.client}` : `${topology.client} -> ${topology.server}`;
}
