// The rma mover, which a process gets only with GDRPC_UNSAFE_RMA=1 (docs/security.md): it still
// moves exact bytes, releases its exposures on every path, and a process without the opt-in
// refuses RMA descriptors instead of unpacking a peer's rkey.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code, nativeStats, type GdrpcError, type Tensor } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { expectPoolsEmpty } from './fixtures/stats.ts';
import { patterned } from './fixtures/tensors.ts';

const MiB = 1 << 20;
let server: ListeningPeer;
let client: Client;
const previous = process.env.GDRPC_UNSAFE_RMA;

async function codeOf(promise: Promise<unknown>): Promise<string | undefined> {
  return promise.then(() => undefined, (error: GdrpcError) => error.code);
}

beforeAll(async () => {
  // Read when the runtime is created (the first connect) and inherited by the servers spawned here.
  process.env.GDRPC_UNSAFE_RMA = '1';
  server = await startServer({ poolBytes: 160 * MiB, maxTensorBytes: 128 * MiB });
  client = await Client.connect(server.address, { poolBytes: 80 * MiB });
});
afterAll(async () => {
  await client?.close();
  await disposePeers();
  if (previous === undefined) delete process.env.GDRPC_UNSAFE_RMA;
  else process.env.GDRPC_UNSAFE_RMA = previous;
});

describe('rma mover (GDRPC_UNSAFE_RMA=1 on both sides)', () => {
  for (const size of [1, 4097, MiB, 64 * MiB]) {
    it(`echoes ${size} bytes exactly`, async () => {
      const x = patterned(size, size % 251);
      const result = await client.unary(EchoDescriptor.methods.echo, { x, tag: 'r' }, { mover: 'rma' });
      const y = result.y as Tensor;
      expect(y.equals(x)).toBe(true);
      y.release();
    });
  }

  it('a deadline during a 64 MiB transfer fails the call; buffers come back', async () => {
    const big = patterned(64 * MiB, 3);
    expect(await codeOf(client.unary(EchoDescriptor.methods.echo, { x: big, tag: 'mid' }, { deadline: 15, mover: 'rma' }))).toBe(Code.DEADLINE_EXCEEDED);
    expect((await client.unary(EchoDescriptor.methods.ping, { n: 9 })).n).toBe(9);
    await expectPoolsEmpty(client);
  });

  it('memory exposed to a peer that dies is unregistered', async () => {
    await using stopped = await startServer({ livenessMs: 5000 });
    const other = await Client.connect(stopped.address, { livenessMs: 800 });
    try {
      await other.unary(EchoDescriptor.methods.ping, { n: 0 });
      const before = nativeStats();
      stopped.stop();
      const call = other.unary(EchoDescriptor.methods.checksum, { x: patterned(MiB) }, { mover: 'rma' });
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(nativeStats().regions).toBe(before.regions + 1);
      expect(await codeOf(call)).toBe(Code.UNAVAILABLE);
      stopped.kill();
      expect(nativeStats().regions).toBe(before.regions);
      expect(nativeStats().rkeys).toBe(before.rkeys);
    } finally {
      await other.close();
    }
  });

  it('a server without the opt-in refuses the RMA descriptor (INVALID_ARGUMENT) and keeps serving', async () => {
    await using strict = await startServer({}, { GDRPC_UNSAFE_RMA: '0' });
    const other = await Client.connect(strict.address);
    try {
      expect(await codeOf(other.unary(EchoDescriptor.methods.checksum, { x: patterned(MiB) }, { mover: 'rma' }))).toBe(Code.INVALID_ARGUMENT);
      expect((await other.unary(EchoDescriptor.methods.ping, { n: 4 })).n).toBe(4);
    } finally {
      await other.close();
    }
  });
});
