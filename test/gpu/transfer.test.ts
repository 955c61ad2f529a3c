// CUDA tensor arguments and results between two processes through both movers, at sizes from
// empty to 1 GiB, contents verified byte for byte, and the path every transfer reports.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callInfo, Runtime, type Client, type Tensor, type TransferInfo } from '../../core/index.ts';
import { openClientSide, type ClientSide } from './fixtures/client-side.ts';
import { DEFAULT_INLINE_BYTES } from '../../core/rpc/connection/connection.ts';
import { announce, DRY_RUN, GPU_MOVERS, EXPECTED_PATH, MAX_BYTES, MiB, skipReason, topologies } from './fixtures/env.ts';
import { firstMismatch, fillTensor, patternDigest } from './fixtures/pattern.ts';
import { startGpuServer, type GpuPeer } from './fixtures/peer.ts';
import { disposePeers } from '../support/peer.ts';

announce('test/gpu/transfer.test.ts');

const SIZES = [0, 1, 4096, MiB, 64 * MiB, 1024 * MiB].filter((size) => size <= MAX_BYTES);
const MOVERS = GPU_MOVERS;
const POOL = MAX_BYTES + MiB;

/** An empty tensor moves nothing: inline, never staged. Anything else between two processes: EXPECTED_PATH.
 *  Without a forced mover (`mover` undefined, e.g. fill's result) small host tensors go inline in the dry run. */
function expectTransfer(info: TransferInfo | undefined, bytes: number, mover?: string): void {
  expect(info).toBeDefined();
  expect(info!.bytes).toBe(bytes);
  if (bytes === 0 || (DRY_RUN && mover === undefined && bytes <= DEFAULT_INLINE_BYTES)) {
    expect(info).toMatchObject({ mover: 'inline', path: 'inline' });
    return;
  }
  if (mover !== undefined) expect(info!.mover).toBe(mover);
  // A sender's path is UCX's description of its send (docs/gpu.md "Transfer paths"): below the
  // rendezvous threshold UCX may send GPU memory eagerly, packed through host buffers, and then
  // says so ("eager ... copy-in/copy-out"); the path is 'staged' then, and only then.
  const eager = bytes < MiB && /\beager\b/.test(info!.protocol ?? '');
  expect(info!.path, info!.protocol).toBe(eager && !DRY_RUN ? 'staged' : EXPECTED_PATH);
}

afterAll(disposePeers);

describe.skipIf(skipReason !== undefined)('CUDA tensors between two processes', () => {
  for (const topology of topologies) {
    describe(topology.name, () => {
      let server: GpuPeer;
      let side: ClientSide;
      let client: Client;
      let spinsBefore = 0;

      beforeAll(async () => {
        // Results are released when their send completes, which may be after the next call arrived: room for two.
        server = await startGpuServer({ device: topology.server, poolBytes: POOL, ownPoolBytes: 2 * POOL });
        side = openClientSide(topology.client, POOL);
        client = await side.connect(server.address, { poolBytes: POOL });
        spinsBefore = Runtime.default().worker.stats().deviceSpins;
      }, 120_000);
      afterAll(async () => {
        await side?.close();
        server?.kill();
      });

      for (const mover of MOVERS) {
        for (const size of SIZES) {
          it(`echoes ${size} bytes (argument and result) with mover ${mover}`, async () => {
            const seed = (size % 251) + (mover === 'tag' ? 1 : 2);
            const x = side.pool.allocate([size], 'u8');
            try {
              await fillTensor(x, seed);
              const result = await client.unary(side.service.methods.echo, { x }, { mover });
              const y = result.y as Tensor;
              try {
                expect(y.device).toBe(topology.client);
                expect(y.shape).toEqual([size]);
                expect(await firstMismatch(y, seed)).toBe(-1);
                const transfers = callInfo(result)!.transfers;
                expectTransfer(transfers.find((t) => t.argument === 'x'), size, mover);
                // The caller's mover travels in the REQUEST: the result comes back the same way.
                expectTransfer(transfers.find((t) => t.argument === 'y'), size, mover);
              } finally {
                y.release();
              }
            } finally {
              x.release();
            }
          }, 120_000);

          it(`delivers a ${size}-byte argument intact to the server with mover ${mover}`, async () => {
            const seed = (size % 241) + (mover === 'tag' ? 3 : 4);
            const x = side.pool.allocate([size], 'u8');
            try {
              await fillTensor(x, seed);
              const result = await client.unary(side.service.methods.digest, { x }, { mover });
              expect(result.n).toBe(size);
              expect(result.sha).toBe(await patternDigest(size, seed));
              expectTransfer(callInfo(result)!.transfers.find((t) => t.argument === 'x'), size, mover);
            } finally {
              x.release();
            }
          }, 120_000);
        }
      }

      for (const size of SIZES) {
        it(`returns a ${size}-byte result made on the server`, async () => {
          const seed = (size % 239) + 5;
          const result = await client.unary(side.service.methods.fill, { n: size, seed });
          const y = result.y as Tensor;
          try {
            expect(y.device).toBe(topology.client);
            expect(await firstMismatch(y, seed)).toBe(-1);
            expectTransfer(callInfo(result)!.transfers.find((t) => t.argument === 'y'), size);
          } finally {
            y.release();
          }
        }, 120_000);
      }

      // The worker polls while a transfer in device memory is in flight instead of sleeping on
      // its fd (native/src/device_wait.h): the calls above began spells, and none is left over.
      it("polled this process's worker while its CUDA transfers were in flight, and has none pending after them", () => {
        const stats = Runtime.default().worker.stats();
        expect(stats.deviceInFlight).toBe(0);
        // Host memory in the dry run, and GDRPC_DEVICE_SPIN_US=0, start none.
        if (!DRY_RUN && stats.deviceSpinLimitUs > 0) expect(stats.deviceSpins).toBeGreaterThan(spinsBefore);
      });

      it('left nothing allocated on the server after the calls', async () => {
        const stats = await side.stats(server.address);
        expect(stats.pools.every((pool) => pool.used === 0 && pool.liveTensors === 0)).toBe(true);
        expect(stats.own).toEqual({ used: 0, liveTensors: 0 });
      });
    });
  }
});
