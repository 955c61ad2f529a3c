// Remote tensors: the callee pulls when it wants; a third service pulls straight from the owner;
// the owner lets go after one pull or at the end of the call; a stale or forged handle is NOT_FOUND.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { Client, Code, RemoteTensor, Runtime, remoteExposures, serveRemoteTensors, shutdownOwner, type GdrpcError } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { serverStats } from './fixtures/stats.ts';
import { byteSum, patterned } from './fixtures/tensors.ts';

let a: ListeningPeer;
let b: ListeningPeer;
let client: Client;

beforeAll(async () => {
  [a, b] = await Promise.all([startServer(), startServer()]);
  // This process only calls: it serves pulls of its @remote tensors where it says, on loopback.
  serveRemoteTensors({ host: '127.0.0.1' });
  client = await Client.connect(a.address);
});
afterAll(async () => {
  await client?.close();
  await shutdownOwner();
  await disposePeers();
});

describe('remote tensors', () => {
  for (const size of [0, 5, 100_000, 3 << 20]) {
    it(`the callee pulls a ${size}-byte handle from the caller`, async () => {
      const h = patterned(size, 9);
      const result = await client.unary(EchoDescriptor.methods.pullSum, { h });
      expect(result.sum).toBe(byteSum(h));
      expect(remoteExposures()).toBe(0);
    });
  }

  it('a pull\'s connection keeps the opening window: it takes nothing from the runtime\'s maxWindowBytes', async () => {
    const { h } = await client.unary(EchoDescriptor.methods.region, { rows: 4, cols: 4 });
    const take = vi.spyOn(Runtime.default().openingWindows, 'take');
    try {
      const tensor = await (h as RemoteTensor).pull();
      expect(tensor.byteLength).toBe(32);
      tensor.release();
      expect(take).not.toHaveBeenCalled();
    } finally {
      take.mockRestore();
    }
  });

  it('a third service pulls directly from the owner', async () => {
    const h = patterned(1 << 20, 4);
    const result = await client.unary(EchoDescriptor.methods.relay, { h, to: b.address });
    expect(result.sum).toBe(byteSum(h));
    expect(remoteExposures()).toBe(0);
  });

  it('a pull after release, or with a forged capability, is NOT_FOUND', async () => {
    const h = patterned(4096, 2);
    const result = await client.unary(EchoDescriptor.methods.pullTwice, { h });
    expect(result).toEqual({ sum: byteSum(h), again: 'NOT_FOUND', forged: 'NOT_FOUND' });
  });

  it('a handle not pulled before its call ends is released; a later pull is NOT_FOUND', async () => {
    const h = patterned(1 << 16, 1);
    const error = await client.unary(EchoDescriptor.methods.latePull, { h, ms: 400 }, { deadline: 150 }).then(() => undefined, (e: GdrpcError) => e);
    expect(error?.code).toBe(Code.DEADLINE_EXCEEDED);
    expect(remoteExposures()).toBe(0);
    await expect.poll(async () => (await serverStats(client)).aborted.includes('late:NOT_FOUND'), { timeout: 5000 }).toBe(true);
    // The same handle pulled within its call works.
    await client.unary(EchoDescriptor.methods.latePull, { h, ms: 1 });
    await expect.poll(async () => (await serverStats(client)).aborted.includes('late:OK'), { timeout: 5000 }).toBe(true);
    expect(remoteExposures()).toBe(0);
  });
});
