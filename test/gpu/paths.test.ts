// Transfer paths as UCX reports them (issue 14): every tag transfer's path must agree with UCX's
// own description of the request (TransferInfo.protocol), and a result that lands in host memory
// must never claim cuda_ipc. Cases: GPU to GPU, GPU to host, host to GPU, and an @remote pull.
// The descriptions are printed, so that a run on new hardware shows what UCX said.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callInfo, Client, Code, GdrpcError, RemoteTensor, Tensor, type TransferInfo } from '../../core/index.ts';
import { parseProtocol, pathOfProtocol } from '../../core/rpc/movers/protocol.ts';
import { gpuService } from './fixtures/service.ts';
import { openClientSide, type ClientSide } from './fixtures/client-side.ts';
import { announce, DRY_RUN, MiB, skipReason, topologies } from './fixtures/env.ts';
import { fillTensor, firstMismatch } from './fixtures/pattern.ts';
import { startGpuServer, type GpuPeer } from './fixtures/peer.ts';
import { disposePeers } from '../support/peer.ts';

announce('test/gpu/paths.test.ts');

const SIZE = 64 * MiB;
const POOL = 2 * SIZE + 2 * MiB;

/** The transfer of `argument`, printed with UCX's description. */
function transfer(result: object, argument: string, what: string): TransferInfo {
  const info = callInfo(result)?.transfers.find((t) => t.argument === argument);
  expect(info, `${what}: ${JSON.stringify(callInfo(result))}`).toBeDefined();
  console.log(`${what}: ${argument} ${info!.mover}/${info!.path} <- ${info!.protocol ?? '(no protocol)'}`);
  return info!;
}

/** A sender's path must be what its UCX description maps to. */
function expectSenderAgrees(info: TransferInfo, from: 'host' | 'cuda', to: 'host' | 'cuda'): void {
  const parsed = parseProtocol(info.protocol ?? '');
  expect(parsed, info.protocol).toBeDefined();
  expect(parsed!.memoryType, info.protocol).toBe(from);
  expect(info.path, info.protocol).toBe(pathOfProtocol(parsed!, from, to));
}

afterAll(disposePeers);

describe.skipIf(skipReason !== undefined || DRY_RUN)('transfer paths read back from UCX', () => {
  for (const topology of topologies) {
    describe(topology.name, () => {
      let server: GpuPeer;
      let side: ClientSide;
      let client: Client;

      beforeAll(async () => {
        server = await startGpuServer({ device: topology.server, poolBytes: POOL, ownPoolBytes: 2 * POOL });
        side = openClientSide(topology.client, POOL);
        client = await side.connect(server.address, { poolBytes: POOL });
      }, 120_000);
      afterAll(async () => {
        await side?.close();
        server?.kill();
      });

      it('GPU to GPU: cuda_ipc both ways, as UCX says; noStaging passes', async () => {
        const x = side.pool.allocate([SIZE], 'u8');
        try {
          await fillTensor(x, 5);
          const result = await client.unary(side.service.methods.echo, { x }, { mover: 'tag', noStaging: true });
          const sent = transfer(result, 'x', 'cuda -> cuda');
          expectSenderAgrees(sent, 'cuda', 'cuda');
          expect(sent.path).toBe('cuda_ipc');
          expect(parseProtocol(sent.protocol!)!.transports).toContain('cuda_ipc');
          const back = transfer(result, 'y', 'cuda -> cuda');
          expect(back.path).toBe('cuda_ipc');
          expect(back.protocol).toBeUndefined();  // receives are not described
          const y = result.y as Tensor;
          expect(await firstMismatch(y, 5)).toBe(-1);
          y.release();
        } finally {
          x.release();
        }
      }, 120_000);

      it('GPU to host (issue 14): a result landing in host memory never reports cuda_ipc', async () => {
        // The caller's copy of the service places results in host memory; the server fills on its GPU.
        const hostSide = gpuService('cpu');
        const result = await client.unary(hostSide.methods.fill, { n: SIZE, seed: 9 });
        const y = result.y as Tensor;
        try {
          expect(y.device).toBe('cpu');
          expect(await firstMismatch(y, 9)).toBe(-1);
          const back = transfer(result, 'y', 'cuda -> host');
          expect(back.protocol).toBeUndefined();  // receives are not described
          expect(back.path).toBe('staged');
        } finally {
          y.release();
        }
        // And noStaging refuses it before the bytes move (the receiver predicts from UCX's memory types).
        const error = await client.unary(hostSide.methods.fill, { n: SIZE, seed: 9 }, { noStaging: true }).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(GdrpcError);
        expect((error as GdrpcError).code).toBe(Code.FAILED_PRECONDITION);
        expect((error as GdrpcError).path).toBe('staged');
      }, 120_000);

      it('host to GPU: the sender reports what UCX did with host memory bound for a GPU', async () => {
        // x in host memory, bound for the server's GPU (its copy of the service places arguments there).
        const x = Tensor.empty([SIZE], 'u8', { device: 'cpu' });
        try {
          await fillTensor(x, 13);
          const result = await client.unary(side.service.methods.digest, { x }, { mover: 'tag' });
          const sent = transfer(result, 'x', 'host -> cuda');
          expectSenderAgrees(sent, 'host', 'cuda');
          expect(sent.path).not.toBe('cuda_ipc');
          // noStaging: refused, before (predicted) or after (UCX said so) the bytes moved.
          const error = await client.unary(side.service.methods.digest, { x }, { mover: 'tag', noStaging: true }).catch((e: unknown) => e);
          if (sent.path === 'staged') {
            expect(error).toBeInstanceOf(GdrpcError);
            expect((error as GdrpcError).code).toBe(Code.FAILED_PRECONDITION);
          }
        } finally {
          x.release();
        }
      }, 120_000);

      it('@remote pull onto the caller\'s GPU: the pulled tensor carries the pull\'s transfer report', async () => {
        const result = await client.unary(side.service.methods.share, { n: SIZE, seed: 17 });
        const handle = result.h as RemoteTensor;
        const tensor = await handle.pull({ pool: side.pool });
        try {
          expect(tensor.device).toBe(topology.client);
          expect(await firstMismatch(tensor, 17)).toBe(-1);
          const pulled = transfer(tensor, 't', '@remote pull');
          expect(pulled.protocol).toBeUndefined();  // receives are not described
          expect(pulled.path).toBe('cuda_ipc');
        } finally {
          tensor.release();
        }
      }, 120_000);
    });
  }
});
