// RemoteTensor.pullAll: many handles as one operation. The owner (a server in its own process)
// hands out handles as results; pulling them all opens one connection to it, not one per handle,
// brings every byte back in order, and a failure in the middle leaves nothing allocated.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code, GdrpcError, RemoteTensor, Runtime, Tensor, type TensorPool } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { codeOf, serverStats } from './fixtures/stats.ts';
import { patterned } from './fixtures/tensors.ts';

let owner: ListeningPeer;
let client: Client;
let pool: TensorPool;

/** `count` handles from the owner, the i-th to `size + i` bytes patterned with seed i. */
async function share(count: number, size: number): Promise<RemoteTensor[]> {
  const result = await client.unary(EchoDescriptor.methods.share, { count, size });
  return (result.items as Array<{ h: RemoteTensor; seed: number }>).map((item) => item.h);
}

beforeAll(async () => {
  owner = await startServer();
  client = await Client.connect(owner.address);
  pool = Runtime.default().createPool({ device: 'cpu', bytes: 4 << 20 });
});
afterAll(async () => {
  await client?.close();
  pool?.close({ force: true });
  await disposePeers();
});

describe('RemoteTensor.pullAll', () => {
  it('pulls 200 handles over one connection to their owner, every byte in order', async () => {
    const handles = await share(200, 3000);
    const before = (await serverStats(client)).accepted;
    const tensors = await RemoteTensor.pullAll(handles, { maxInFlight: 16 });
    try {
      expect((await serverStats(client)).accepted - before).toBe(1);
      expect(tensors).toHaveLength(200);
      for (const [i, tensor] of tensors.entries()) {
        expect(tensor.equals(patterned(3000 + i, i)), `handle ${i}`).toBe(true);
      }
    } finally {
      for (const tensor of tensors) tensor.release();
    }
  });

  it('one pull each opens one connection each: what pullAll saves', async () => {
    const handles = await share(5, 64);
    const before = (await serverStats(client)).accepted;
    const tensors = await Promise.all(handles.map((h) => h.pull()));
    expect((await serverStats(client)).accepted - before).toBe(5);
    for (const tensor of tensors) tensor.release();
  });

  it('lands in the tensors given in into, or in a pool', async () => {
    const handles = await share(4, 100);
    const into = handles.map((h) => Tensor.zeros([...h.shape], h.dtype));
    const landed = await RemoteTensor.pullAll(handles, { into });
    expect(landed).toEqual(into);
    for (const [i, tensor] of into.entries()) expect(tensor.equals(patterned(100 + i, i))).toBe(true);

    const pooled = await RemoteTensor.pullAll(await share(3, 70_000), { pool });
    expect(pooled.map((t) => t.pool)).toEqual([pool, pool, pool]);
    expect(pool.stats().liveTensors).toBe(3);
    for (const tensor of pooled) tensor.release();
    expect(pool.stats().liveTensors).toBe(0);
  });

  it('an empty list is an empty result, without connecting', async () => {
    const before = (await serverStats(client)).accepted;
    expect(await RemoteTensor.pullAll([])).toEqual([]);
    expect((await serverStats(client)).accepted).toBe(before);
  });

  it('a handle that fails (forged) fails the whole pull, and every tensor it made goes back', async () => {
    const handles = await share(40, 50_000);
    handles[17] = handles[17]!.withWire({ ...handles[17]!.wire, s: new Uint8Array(16) });
    expect(await codeOf(RemoteTensor.pullAll(handles, { pool, maxInFlight: 4 }))).toBe(Code.NOT_FOUND);
    expect(pool.stats()).toMatchObject({ liveTensors: 0, used: 0 });
    // The handles it did pull are spent (one pull each); the ones it never reached still work.
    const codes = await Promise.all(handles.map((h, i) => (i === 17 ? 'forged' : h.pull().then((t) => { t.release(); return 'OK'; }, (e: GdrpcError) => e.code))));
    expect(codes.filter((c) => c === 'NOT_FOUND').length + codes.filter((c) => c === 'OK').length).toBe(39);
    expect(codes.filter((c) => c === 'NOT_FOUND').length).toBeGreaterThan(0);
  });

  it('refuses bad input before connecting: not handles, into of another length or size, bad maxInFlight', async () => {
    const handles = await share(2, 10);
    const refused = async (promise: Promise<unknown>): Promise<string> => {
      const error = await promise.then(() => undefined, (e: unknown) => e);
      expect(error).toBeInstanceOf(GdrpcError);
      expect((error as GdrpcError).code).toBe(Code.INVALID_ARGUMENT);
      return (error as GdrpcError).rawMessage;
    };
    const before = (await serverStats(client)).accepted;
    expect(await refused(RemoteTensor.pullAll('nope' as unknown as RemoteTensor[]))).toMatch(/array of RemoteTensors/);
    expect(await refused(RemoteTensor.pullAll([handles[0]!, {} as RemoteTensor]))).toMatch(/array of RemoteTensors/);
    expect(await refused(RemoteTensor.pullAll(handles, { into: [Tensor.zeros([10], 'u8')] }))).toMatch(/1 tensors in into for 2 handles/);
    expect(await refused(RemoteTensor.pullAll(handles, { into: [Tensor.zeros([10], 'u8'), Tensor.zeros([9], 'u8')] }))).toMatch(/pull into a u8 tensor of 9 bytes/);
    expect(await refused(RemoteTensor.pullAll(handles, { maxInFlight: 0 }))).toMatch(/maxInFlight/);
    expect((await serverStats(client)).accepted).toBe(before);
    // The handles were not spent by the refusals.
    const tensors = await RemoteTensor.pullAll(handles);
    expect(tensors.map((t) => t.byteLength)).toEqual([10, 11]);
    for (const tensor of tensors) tensor.release();
  });
});
