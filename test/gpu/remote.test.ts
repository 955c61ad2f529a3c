// Remote tensor handles on the GPU: a handle pulled into the caller's own pool on its device, its
// blocks pulled by a block table, a handle passed on to a third process that pulls it straight
// from the owner, and a handle that is gone once pulled (NOT_FOUND, never other memory).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Code, confirmedCallInfo, RemoteTensor, type Client } from '../../core/index.ts';
import { codeOf, openClientSide, type ClientSide } from './fixtures/client-side.ts';
import { announce, DRY_RUN, EXPECTED_PATH, MAX_BYTES, MiB, skipReason, topologies } from './fixtures/env.ts';
import { firstMismatch, misplacedBlocks, patternDigest } from './fixtures/pattern.ts';
import { startGpuServer, type GpuPeer } from './fixtures/peer.ts';
import { disposePeers } from '../support/peer.ts';

announce('test/gpu/remote.test.ts');

const SIZES = [MiB, MAX_BYTES].filter((size, i, all) => all.indexOf(size) === i);
const POOL = MAX_BYTES + 2 * MiB;

afterAll(disposePeers);

describe.skipIf(skipReason !== undefined)('remote CUDA tensors', () => {
  for (const topology of topologies) {
    describe(topology.name, () => {
      let owner: GpuPeer;
      let third: GpuPeer;
      let side: ClientSide;
      let toOwner: Client;
      let toThird: Client;

      beforeAll(async () => {
        // The owner holds the tensors on the server device; the third party pulls onto the client's.
        owner = await startGpuServer({ device: topology.server, poolBytes: MiB, ownPoolBytes: 2 * POOL + 128 * MiB });
        third = await startGpuServer({ device: topology.client, poolBytes: MiB, ownPoolBytes: POOL });
        side = openClientSide(topology.client, POOL);
        toOwner = await side.connect(owner.address, { poolBytes: 0 });
        toThird = await side.connect(third.address, { poolBytes: 0 });
      }, 120_000);
      afterAll(async () => {
        await side?.close();
        owner?.kill();
        third?.kill();
      });

      for (const size of SIZES) {
        it(`pulls a ${size}-byte handle into the caller's pool on ${topology.client}`, async () => {
          const seed = 11 + (size % 7);
          const result = await toOwner.unary(side.service.methods.share, { n: size, seed });
          const handle = result.h as RemoteTensor;
          expect(handle).toBeInstanceOf(RemoteTensor);
          expect(handle.byteLength).toBe(size);
          const before = side.pool.stats().liveTensors;
          const tensor = await handle.pull({ pool: side.pool });
          try {
            expect(tensor.pool).toBe(side.pool);
            expect(tensor.device).toBe(topology.client);
            expect(side.pool.stats().liveTensors).toBe(before + 1);
            expect(await firstMismatch(tensor, seed)).toBe(-1);
          } finally {
            tensor.release();
          }
          // One pull per handle: the owner has let go of it.
          expect(await codeOf(handle.pull({ pool: side.pool }))).toBe(Code.NOT_FOUND);
        }, 120_000);
      }

      it(`pulls blocks of 32 KiB by a block table into a cache on ${topology.client} (pullBlocks), each in its place`, async () => {
        const blockBytes = 32 << 10;
        const size = Math.min(128 * MiB, MAX_BYTES);
        const count = size / blockBytes;
        const seed = 31;
        const handle = (await toOwner.unary(side.service.methods.share, { n: size, seed })).h as RemoteTensor;
        // Owner block (k * 1031) % count lands at block count - 1 - k of the cache.
        const from = Uint32Array.from({ length: count }, (_, k) => (k * 1031) % count);
        const to = Uint32Array.from({ length: count }, (_, k) => count - 1 - k);
        const cache = side.pool.allocate([count, blockBytes], 'u8');
        let paths: string[] = [];
        try {
          await handle.pullBlocks(from, { into: cache, at: to, blockBytes });
          const info = await confirmedCallInfo(cache);
          expect(info?.transfers).toHaveLength(Math.ceil(size / (32 * MiB)));
          paths = info!.transfers.map((transfer) => transfer.path);
          expect(misplacedBlocks(cache, seed, size, blockBytes, from, to)).toBe(0);
        } finally {
          cache.release();
        }
        // The handle stays pullable: the whole tensor still comes, intact, and each part moved the
        // way the whole tensor does (cuda_ipc between GPUs).
        const whole = await handle.pull({ pool: side.pool });
        expect(await firstMismatch(whole, seed)).toBe(-1);
        const wholePath = (await confirmedCallInfo(whole))?.transfers[0]?.path;
        whole.release();
        expect(paths).toEqual(paths.map(() => wholePath));
        if (!DRY_RUN) expect(wholePath).toBe(EXPECTED_PATH);
      }, 120_000);

      it('lets a third process pull a handle straight from its owner', async () => {
        const size = Math.min(64 * MiB, MAX_BYTES);
        const seed = 23;
        const result = await toOwner.unary(side.service.methods.share, { n: size, seed });
        const handle = result.h as RemoteTensor;
        const digest = await toThird.unary(side.service.methods.pullDigest, { h: handle });
        expect(digest.sha).toBe(await patternDigest(size, seed));
        // The third party used up the handle; the caller cannot pull it any more.
        expect(await codeOf(handle.pull({ pool: side.pool }))).toBe(Code.NOT_FOUND);
        const stats = await side.stats(owner.address);
        expect(stats.runs.share).toBeGreaterThanOrEqual(1);
        expect(stats.remoteExposures).toBe(0);
      }, 120_000);
    });
  }
});
