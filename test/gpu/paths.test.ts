// Transfer paths as UCX reports them (issue 14): every tag transfer's path must agree with UCX's
// own description of the request (TransferInfo.protocol), and a result that lands in host memory
// must never claim cuda_ipc. Cases: GPU to GPU, GPU to host, host to GPU, and an @remote pull.
// The descriptions are printed, so that a run on new hardware shows what UCX said.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callInfo, Client, Code, confirmedCallInfo, GdrpcError, RemoteTensor, Tensor, type TransferInfo } from '../../core/index.ts';
import { parseProtocol, pathOfProtocol } from '../../core/rpc/movers/protocol.ts';
import { gpuService } from './fixtures/service.ts';
import { openClientSide, type ClientSide } from './fixtures/client-side.ts';
import { announce, DRY_RUN, MiB, skipReason, topologies } from './fixtures/env.ts';
import { fillTensor, firstMismatch } from './fixtures/pattern.ts';
import { startGpuServer, type GpuPeer } from './fixtures/peer.ts';
import { disposePeers } from '../support/peer.ts';
import { parseProtocolTables, protocolBody, usedRowFor } from './fixtures/proto-info.ts';
import type { ServerStats } from './fixtures/service.ts';

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
          expect(pulled.path).toBe('cuda_ipc');
        } finally {
          tensor.release();
        }
      }, 120_000);
    });
  }
});


describe.skipIf(skipReason !== undefined || DRY_RUN)('a receiver reports its sender\'s UCX description (SENT), as UCX_PROTO_INFO shows it', () => {
  for (const topology of topologies) {
    it(`${topology.name}: cuda -> cuda, cuda -> host, host -> cuda, @remote pull, and a small result UCX bounced`, async () => {
      const server = await startGpuServer({ device: topology.server, poolBytes: POOL, ownPoolBytes: 2 * POOL, env: { UCX_PROTO_INFO: 'used' } });
      const side = openClientSide(topology.client, POOL);
      /** Transfers the server sent and the client received: their reports are the server's UCX's. */
      const fromServer: Array<{ what: string; info: TransferInfo }> = [];
      /** Transfers the server received, as its handler saw them once the client's reports came. */
      const atServer: Array<{ what: string; info: TransferInfo }> = [];
      const received = async (result: object, argument: string, what: string): Promise<TransferInfo> => {
        await confirmedCallInfo(result);
        const info = transfer(result, argument, what);
        fromServer.push({ what, info });
        return info;
      };
      try {
        const client = await side.connect(server.address, { poolBytes: POOL });
        const x = side.pool.allocate([SIZE], 'u8');
        try {
          await fillTensor(x, 5);
          const echoed = await client.unary(side.service.methods.echo, { x }, { mover: 'tag' });
          expect(await received(echoed, 'y', 'cuda -> cuda result')).toMatchObject({ source: 'sender', path: 'cuda_ipc' });
          (echoed.y as Tensor).release();

          // Arguments as the server's handler saw them once the client's reports came.
          const digested = async (value: Tensor, what: string): Promise<void> => {
            const result = await client.unary(side.service.methods.digest, { x: value }, { mover: 'tag' });
            const sent = transfer(result, 'x', what);
            const stats = JSON.parse((await client.unary(side.service.methods.stats, {})).json as string) as ServerStats & { digested: TransferInfo[] };
            const seen = stats.digested.find((info) => info.argument === 'x')!;
            console.log(`${what} at the server: ${seen.mover}/${seen.path} (${seen.source}) <- ${seen.protocol ?? '(no protocol)'}`);
            expect(seen).toMatchObject({ source: 'sender', protocol: sent.protocol, path: sent.path });
            atServer.push({ what, info: seen });
          };
          await digested(x, 'cuda -> cuda argument');
          const h = Tensor.empty([SIZE], 'u8', { device: 'cpu' });
          try {
            await fillTensor(h, 13);
            await digested(h, 'host -> cuda argument');
          } finally {
            h.release();
          }
        } finally {
          x.release();
        }

        const hostSide = gpuService('cpu');
        const filled = await client.unary(hostSide.methods.fill, { n: SIZE, seed: 9 });
        expect(await received(filled, 'y', 'cuda -> host result')).toMatchObject({ source: 'sender', path: 'staged' });
        (filled.y as Tensor).release();

        const shared = await client.unary(side.service.methods.share, { n: SIZE, seed: 17 });
        const pulled = await (shared.h as RemoteTensor).pull({ pool: side.pool });
        expect(await received(pulled, 't', '@remote pull')).toMatchObject({ source: 'sender', path: 'cuda_ipc' });
        pulled.release();

        // Below the rendezvous threshold UCX sends GPU memory eagerly through host buffers. The
        // lanes predict cuda_ipc, so only the server's report can tell, and noStaging then fails
        // the call once the bytes are in.
        const small = await client.unary(side.service.methods.fill, { n: 1024, seed: 3 });
        expect(await received(small, 'y', 'small cuda -> cuda result')).toMatchObject({ source: 'sender', path: 'staged' });
        (small.y as Tensor).release();
        const refused = await client.unary(side.service.methods.fill, { n: 1024, seed: 3 }, { noStaging: true }).catch((e: unknown) => e);
        expect(refused).toBeInstanceOf(GdrpcError);
        expect((refused as GdrpcError).code).toBe(Code.FAILED_PRECONDITION);
        expect((refused as GdrpcError).message).toMatch(/as the sender reported/);
        expect((await client.unary(side.service.methods.ping, { n: 1 })).n).toBe(1);

        await client.close();
        server.send('shutdown');
        expect((await server.exited).code).toBe(0);
      } finally {
        await side.close();
        server.kill();
      }
      const output = server.output();
      console.log(`UCX protocols used by the server (${topology.name}):\n${output.split('\n').filter((l) => l.includes('|')).join('\n')}`);
      const blocks = parseProtocolTables(output);
      // What the server sent: a row of its own send tables.
      const rows = blocks.flatMap((block) => block.rows);
      for (const { what, info } of fromServer) {
        expect(usedRowFor(rows, info.bytes, protocolBody(info.protocol!)), `${what}: ${info.protocol}`).toBeDefined();
      }
      // What the server received: the protocol its UCX ran as the receiver ("rendezvous data fetch
      // into <its memory>") is the one the client's report names.
      const fetched = blocks.filter((block) => /^rendezvous data fetch into /.test(block.operation)).flatMap((block) => block.rows);
      expect(atServer.length).toBe(2);
      for (const { what, info } of atServer) {
        expect(usedRowFor(fetched, info.bytes, protocolBody(info.protocol!).replace(/^rendezvous /, '')), `${what} at the server: ${info.protocol}`).toBeDefined();
      }
    }, 240_000);
  }
});
