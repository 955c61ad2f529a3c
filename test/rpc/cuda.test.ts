// GPU memory through the RPC runtime (skipped without a GPU): tensors on cuda:0 in both processes,
// every mover, contents verified, paths reported, and noStaging refusing what would go through
// host memory (RMA reads of GPU memory in UCX 1.22) while letting cuda_ipc through.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code, GdrpcError, callInfo, cuda, type Tensor } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { patterned } from './fixtures/tensors.ts';

const gpu = cuda.available() && cuda.deviceCount() > 0;
if (!gpu) console.log(`test/rpc/cuda: skipped, no GPU (${cuda.unavailableReason() ?? 'no device'})`);
const MiB = 1 << 20;

let server: ListeningPeer;
let client: Client;

/** A patterned tensor of `size` bytes in the client's GPU pool. */
function onGpu(size: number): { gpu: Tensor; host: Tensor } {
  const host = patterned(size, size % 13);
  const tensor = client.pool('cuda:0').allocate([size], 'u8');
  if (size > 0) cuda.copy(tensor.address, host.bytes(), size);
  return { gpu: tensor, host };
}

describe.skipIf(!gpu)('cuda tensors', () => {
  beforeAll(async () => {
    server = await startServer({ poolBytes: 160 * MiB, maxTensorBytes: 128 * MiB });
    client = await Client.connect(server.address, { poolBytes: 160 * MiB });
  });
  afterAll(async () => {
    await client?.close();
    await disposePeers();
  });

  // KV-cache-like blocks: 1,024 GPU tensors of 32 KiB share one tag message each way (mover g),
  // gathered by one block-copy kernel on the sender and scattered by one on the receiver.
  it('1,024 blocks of 32 KiB as a gathered list, both ways, under noStaging', async () => {
    const count = 1024;
    const bytes = 32 << 10;
    const blocks = Array.from({ length: count }, (_, i) => {
      const host = patterned(bytes, i % 251);
      const tensor = client.pool('cuda:0').allocate([bytes], 'u8');
      cuda.copy(tensor.address, host.bytes(), bytes);
      return { gpu: tensor, host };
    });
    try {
      const started = performance.now();
      const result = await client.unary(EchoDescriptor.methods.echoListCuda, { xs: blocks.map((b) => b.gpu) }, { noStaging: true });
      const ms = performance.now() - started;
      const ys = result.ys as Tensor[];
      expect(ys.length).toBe(count);
      for (const [i, y] of ys.entries()) {
        expect(y.device).toBe('cuda:0');
        if (!y.to('cpu').equals(blocks[i]!.host)) throw new Error(`ys[${i}] differs`);
        y.release();
      }
      const transfers = callInfo(result)!.transfers;
      console.log(`test/rpc/cuda: ${count} x ${bytes} B gathered both ways in ${ms.toFixed(1)} ms; ${transfers[0]!.path} <- ${transfers[0]!.protocol}`);
      expect(transfers.length).toBe(2 * count);
      for (const info of transfers) expect(info).toMatchObject({ mover: 'tag', bytes, gathered: count, path: 'cuda_ipc' });
    } finally {
      for (const b of blocks) b.gpu.release();
    }
  });

  for (const size of [MiB, 64 * MiB]) {
    it(`${size} bytes GPU to GPU by tag over cuda_ipc, noStaging`, async () => {
      const { gpu: x, host } = onGpu(size);
      const result = await client.unary(EchoDescriptor.methods.echoCuda, { x }, { mover: 'tag', noStaging: true });
      const y = result.y as Tensor;
      expect(result.device).toBe('cuda:0');
      expect(y.device).toBe('cuda:0');
      expect(y.to('cpu').equals(host)).toBe(true);
      expect(callInfo(result)!.transfers.map((t) => `${t.mover}/${t.path}`)).toEqual(['tag/cuda_ipc', 'tag/cuda_ipc']);
      y.release();
      x.release();
    });
  }

  // Below the rendezvous threshold UCX may send GPU memory eagerly through host buffers: the path
  // then says 'staged' because UCX's description of the send says so (docs/gpu.md "Transfer paths").
  for (const size of [1, 4096]) {
    it(`${size} bytes GPU to GPU by tag: the path UCX describes`, async () => {
      const { gpu: x, host } = onGpu(size);
      const result = await client.unary(EchoDescriptor.methods.echoCuda, { x }, { mover: 'tag' });
      const y = result.y as Tensor;
      expect(y.to('cpu').equals(host)).toBe(true);
      const sent = callInfo(result)!.transfers[0]!;
      console.log(`test/rpc/cuda: ${size} bytes: ${sent.path} <- ${sent.protocol}`);
      expect(sent.path, sent.protocol).toBe(/\beager\b/.test(sent.protocol ?? '') ? 'staged' : 'cuda_ipc');
      y.release();
      x.release();
    });
  }

  // RMA reads of GPU memory are zero-copy cuda_ipc only with cuda_ipc GET forced on (docs/gpu.md).
  const rmaDirect = /^(y|yes|on|1|true)$/i.test(process.env.UCX_CUDA_IPC_ENABLE_GET_ZCOPY ?? '');

  it('RMA (unless cuda_ipc GET is on) and inline of GPU memory stage through the host: refused under noStaging, correct without', async () => {
    const { gpu: x, host } = onGpu(MiB);
    for (const mover of rmaDirect ? ['inline'] as const : ['rma', 'inline'] as const) {
      const error = await client.unary(EchoDescriptor.methods.echoCuda, { x }, { mover, noStaging: true }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(GdrpcError);
      expect((error as GdrpcError).code).toBe(Code.FAILED_PRECONDITION);
      expect((error as GdrpcError).path).toBe('staged');
      const result = await client.unary(EchoDescriptor.methods.echoCuda, { x }, { mover });
      expect((result.y as Tensor).to('cpu').equals(host)).toBe(true);
      expect(callInfo(result)!.transfers[0]).toMatchObject({ mover, path: 'staged' });
      (result.y as Tensor).release();
    }
    x.release();
  });

  it('a GPU tensor outside any pool is registered for the call and sent', async () => {
    const host = patterned(3 * MiB, 7);
    const x = host.to('cuda:0');
    const result = await client.unary(EchoDescriptor.methods.echoCuda, { x }, { noStaging: true });
    expect((result.y as Tensor).to('cpu').equals(host)).toBe(true);
    (result.y as Tensor).release();
    x.release();
  });
});
