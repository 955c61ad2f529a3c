// Direct block-table pulls on GPUs (RemoteTensor.pullBlocks `direct`): the owner grants its
// allocation's CUDA IPC handle (ServerOptions.directPulls), the puller maps it and one kernel of
// its own copies every block to its place. Checked block by block, twice over a shared connection
// (the owner's answer kept) and without one, against an owner that does not grant it (the two-sided pull),
// and for a handle that is gone (NOT_FOUND, nothing read).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callInfo, Code, RemoteTensor, type Client, type Tensor } from '../../core/index.ts';
import { cuda } from '../../core/cuda.ts';
import { codeOf, openClientSide, type ClientSide } from './fixtures/client-side.ts';
import { announce, DRY_RUN, MAX_BYTES, MiB, skipReason, topologies } from './fixtures/env.ts';
import { misplacedBlocks } from './fixtures/pattern.ts';
import { startGpuServer, type GpuPeer } from './fixtures/peer.ts';
import { disposePeers } from '../support/peer.ts';

announce('test/gpu/direct-pulls.test.ts');

const SIZE = Math.min(128 * MiB, MAX_BYTES);
const BLOCK = 32 << 10;
const COUNT = SIZE / BLOCK;
const POOL = 2 * SIZE + 8 * MiB;

afterAll(disposePeers);

/** The blocks of `cache` that are not where a pull of `from` into places `to` of a pattern(`seed`) tensor puts them. */
function misplaced(cache: Tensor, seed: number, from: ArrayLike<number>, to: ArrayLike<number>): number {
  return misplacedBlocks(cache, seed, SIZE, BLOCK, from, to);
}

/** Zeroes `tensor`, so that a block a pull missed shows. */
function clear(tensor: Tensor): void {
  if (tensor.device === 'cpu') tensor.bytes().fill(0);
  else cuda.memset(tensor.address, 0, tensor.byteLength);
}

describe.skipIf(skipReason !== undefined)('direct block-table pulls', () => {
  for (const topology of topologies) {
    describe(topology.name, () => {
      let trusting: GpuPeer;
      let plain: GpuPeer;
      let side: ClientSide;
      let toTrusting: Client;
      let toPlain: Client;
      const from = Uint32Array.from({ length: COUNT }, (_, k) => (k * 1031) % COUNT);
      const to = Uint32Array.from({ length: COUNT }, (_, k) => COUNT - 1 - k);

      beforeAll(async () => {
        trusting = await startGpuServer({ device: topology.server, poolBytes: MiB, ownPoolBytes: 2 * SIZE + 64 * MiB, directPulls: true });
        plain = await startGpuServer({ device: topology.server, poolBytes: MiB, ownPoolBytes: SIZE + 64 * MiB });
        side = openClientSide(topology.client, POOL);
        toTrusting = await side.connect(trusting.address, { poolBytes: 0 });
        toPlain = await side.connect(plain.address, { poolBytes: 0 });
      }, 120_000);
      afterAll(async () => {
        await side?.close();
        trusting?.kill();
        plain?.kill();
      });

      it(`reads ${COUNT} blocks of 32 KiB straight from the owner's memory with one kernel, each in its place`, async () => {
        const seed = 41;
        const handle = (await toTrusting.unary(side.service.methods.share, { n: SIZE, seed })).h as RemoteTensor;
        const cache = side.pool.allocate([COUNT, BLOCK], 'u8');
        const via = await handle.connect();
        try {
          for (let round = 0; round < 2; round += 1) {
            clear(cache);
            await handle.pullBlocks(from, { into: cache, at: to, blockBytes: BLOCK, via, direct: true });
            expect(misplaced(cache, seed, from, to), `round ${round}`).toBe(0);
            const transfers = callInfo(cache)?.transfers ?? [];
            console.log(`[gpu] ${topology.name}: direct pull round ${round}: ${JSON.stringify(transfers.map((t) => [t.argument, t.path, t.protocol]))}`);
            if (DRY_RUN) expect(transfers.map((t) => t.argument)).toEqual(['t', 't', 't', 't'].slice(0, Math.ceil(SIZE / (32 * MiB))));
            else expect(transfers).toEqual([expect.objectContaining({ argument: 'blocks', bytes: SIZE, path: 'cuda_ipc', protocol: expect.stringMatching(/^gdrpc direct: /) })]);
          }
          // Without a shared connection: a question and a mapping of its own.
          clear(cache);
          const fresh = await handle.pullBlocks(from.subarray(0, 100), { pool: side.pool, blockBytes: BLOCK, direct: true });
          try {
            expect(fresh.shape).toEqual([100, BLOCK]);
            expect(misplaced(fresh, seed, from.subarray(0, 100), Array.from({ length: 100 }, (_, k) => k))).toBe(0);
          } finally {
            fresh.release();
          }
          // A handle that is gone: the owner refuses to map it, nothing is read.
          const whole = await handle.pull({ pool: side.pool });
          whole.release();
          expect(await codeOf(handle.pullBlocks([0], { into: cache, blockBytes: BLOCK, via, direct: true }))).toBe(Code.NOT_FOUND);
        } finally {
          await via.close();
          cache.release();
        }
      }, 180_000);

      it('pulls the two-sided way from an owner that does not grant direct pulls', async () => {
        const seed = 43;
        const handle = (await toPlain.unary(side.service.methods.share, { n: SIZE, seed })).h as RemoteTensor;
        const cache = side.pool.allocate([COUNT, BLOCK], 'u8');
        try {
          await handle.pullBlocks(from, { into: cache, at: to, blockBytes: BLOCK, direct: true });
          expect(misplaced(cache, seed, from, to)).toBe(0);
          expect(new Set(callInfo(cache)?.transfers.map((t) => t.argument))).toEqual(new Set(['t']));
        } finally {
          cache.release();
        }
      }, 180_000);
    });
  }
});
