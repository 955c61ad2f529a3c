// RemoteTensor.pullAll: many handles as one operation. The owner (a server in its own process)
// hands out handles as results; pulling them all opens one connection to it, not one per handle,
// asks for handles of one shape in batches (gdrpc.Owner/pullMany), brings every byte back in
// order, and a failure in the middle leaves nothing allocated. A fake owner shows the batching
// and the fallback for an owner without pullMany.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callInfo, Client, Code, GdrpcError, RemoteTensor, Runtime, Tensor, type MethodDescriptor, type TensorPool } from '../../core/index.ts';
import { PULL_MANY_ARGS, type OwnerClient, type OwnerDialer } from '../../core/rpc/remote/remote.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { codeOf, serverStats } from './fixtures/stats.ts';
import { rejection } from './fixtures/thrown.ts';
import { patterned } from './fixtures/tensors.ts';

let owner: ListeningPeer;
let client: Client;
let pool: TensorPool;

/** The message of the INVALID_ARGUMENT `promise` rejects with (fails the test otherwise). */
async function invalidArgument(promise: Promise<unknown>): Promise<string> {
  const error = await rejection(promise);
  expect(error.code).toBe(Code.INVALID_ARGUMENT);
  return error.rawMessage;
}

/** `count` handles from the owner, the i-th patterned with seed i: `size + i` bytes each, or
 *  `size` bytes each when `uniform`. */
async function share(count: number, size: number, uniform = false): Promise<RemoteTensor[]> {
  const result = await client.unary(EchoDescriptor.methods.share, { count, size, uniform });
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

  it('asks for handles of one shape in batches of 128 (gdrpc.Owner/pullMany), over one connection', async () => {
    const handles = await share(300, 2048, true);
    const before = (await serverStats(client)).accepted;
    const tensors = await RemoteTensor.pullAll(handles);
    try {
      expect((await serverStats(client)).accepted - before).toBe(1);
      for (const [i, tensor] of tensors.entries()) {
        expect(tensor.equals(patterned(2048, i)), `handle ${i}`).toBe(true);
        // Each tensor reports its own transfer, named by its place in its batch.
        expect(callInfo(tensor)?.transfers.map((t) => t.argument)).toEqual([`ts[${i % 128}]`]);
      }
    } finally {
      for (const tensor of tensors) tensor.release();
    }
  });

  it('2,048 blocks of 32 KiB, four times: batches whose payloads outrun their frames keep the connection', async () => {
    // 512 tensors in flight arrive faster than their RESPONSE frames are read; before the binding
    // held payloads back while a frame's receive waited to be settled, this lost the connection
    // ("sent more than 64 tensor payloads that no frame announced") in about half the runs.
    const blocks = Runtime.default().createPool({ device: 'cpu', bytes: (2048 * 32 + 1024) << 10 });
    for (let round = 0; round < 4; round += 1) {
      const handles = await share(2048, 32 << 10, true);
      const tensors = await RemoteTensor.pullAll(handles, { pool: blocks });
      try {
        expect(tensors).toHaveLength(2048);
        for (const i of [0, 1, 1023, 2047]) expect(tensors[i]!.equals(patterned(32 << 10, i)), `block ${i}`).toBe(true);
      } finally {
        for (const tensor of tensors) tensor.release();
      }
    }
    blocks.close();
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

  it('a forged handle in a batch fails the batch whole: nothing is spent, nothing is kept', async () => {
    const handles = await share(40, 50_000, true);
    handles[17] = handles[17]!.withWire({ ...handles[17]!.wire, s: new Uint8Array(16) });
    expect(await codeOf(RemoteTensor.pullAll(handles, { pool }))).toBe(Code.NOT_FOUND);
    expect(pool.stats()).toMatchObject({ liveTensors: 0, used: 0 });
    const again = await RemoteTensor.pullAll(handles.filter((_, i) => i !== 17), { pool });
    expect(again.map((t, k) => t.equals(patterned(50_000, k < 17 ? k : k + 1)))).toEqual(new Array(39).fill(true));
    for (const tensor of again) tensor.release();
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
    const before = (await serverStats(client)).accepted;
    expect(await invalidArgument(RemoteTensor.pullAll('nope' as unknown as RemoteTensor[]))).toMatch(/array of RemoteTensors/);
    expect(await invalidArgument(RemoteTensor.pullAll([handles[0]!, {} as RemoteTensor]))).toMatch(/array of RemoteTensors/);
    expect(await invalidArgument(RemoteTensor.pullAll(handles, { into: [Tensor.zeros([10], 'u8')] }))).toMatch(/1 tensors in into for 2 handles/);
    expect(await invalidArgument(RemoteTensor.pullAll(handles, { into: [Tensor.zeros([10], 'u8'), Tensor.zeros([9], 'u8')] }))).toMatch(/pull into a u8 tensor of 9 bytes/);
    expect(await invalidArgument(RemoteTensor.pullAll(handles, { maxInFlight: 0 }))).toMatch(/maxInFlight/);
    expect(await invalidArgument(RemoteTensor.pullAll(handles, { into: 'x' as unknown as Tensor[] }))).toMatch(/into must be an array of Tensors/);
    expect((await serverStats(client)).accepted).toBe(before);
    // The handles were not spent by the refusals.
    const tensors = await RemoteTensor.pullAll(handles);
    expect(tensors.map((t) => t.byteLength)).toEqual([10, 11]);
    for (const tensor of tensors) tensor.release();
  });
});

describe('gdrpc.Owner/pullMany called by hand (what a hostile peer can send)', () => {
  const pullMany: MethodDescriptor = { name: 'pullMany', service: 'gdrpc.Owner', clientStreaming: false, serverStreaming: false, args: PULL_MANY_ARGS, results: [] };
  const asked = (handles: RemoteTensor[]) => ({ xs: handles.map((h) => h.wire.x!), ss: handles.map((h) => h.wire.s!) });

  it('refuses mismatched lists, empty or oversized batches and mixed shapes, spending nothing', async () => {
    const handles = await share(3, 16);  // 16, 17 and 18 bytes
    const refusal = (args: Record<string, unknown>): Promise<string> => invalidArgument(client.unary(pullMany, args));
    expect(await refusal({ xs: [handles[0]!.wire.x!], ss: [] })).toMatch(/1 handles but 0 capabilities/);
    expect(await refusal({ xs: [], ss: [] })).toMatch(/takes 1 to 1024 handles, got 0/);
    expect(await refusal({ xs: new Array(1025).fill(1), ss: new Array(1025).fill(new Uint8Array(16)) })).toMatch(/got 1025/);
    expect(await refusal(asked(handles))).toMatch(/handle 1 is not a u8 \[16\] tensor like the first/);
    const tensors = await RemoteTensor.pullAll(handles);
    expect(tensors.map((t) => t.byteLength)).toEqual([16, 17, 18]);
    for (const tensor of tensors) tensor.release();
  });
});

describe('RemoteTensor.pullAll against a fake owner', () => {
  /** Handles of `bytes` bytes each at owner "fake:1", pulled through `client`. */
  function fakeHandles(count: number, bytes: (i: number) => number, client: OwnerClient): RemoteTensor[] {
    const dial: OwnerDialer = () => Promise.resolve(client);
    return Array.from({ length: count }, (_, i) => new RemoteTensor({ dt: 'u8', sh: [bytes(i)], n: bytes(i), mt: 'host', m: 'h', o: 'fake:1', x: i + 1, s: new Uint8Array(16) }, dial));
  }

  /** An owner that answers pull and, unless `old`, pullMany, with tensors whose first byte is x. */
  function fakeOwner(old: boolean): OwnerClient & { calls: string[]; closed: number } {
    const owner = {
      calls: [] as string[],
      closed: 0,
      unary(method: MethodDescriptor, args: Record<string, unknown>) {
        owner.calls.push(`${method.name}:${method.name === 'pullMany' ? (args.xs as number[]).length : 1}`);
        const make = (x: number, type: MethodDescriptor['results'][number]['type']) => {
          const shape = type.kind === 'tensor' ? type.shape.map((d) => (d.kind === 'fixed' ? d.size : 0)) : [];
          const t = Tensor.zeros(shape, 'u8');
          t.bytes()[0] = x;
          return t;
        };
        if (method.name === 'pull') return Promise.resolve({ t: make(args.x as number, method.results[0]!.type) });
        if (old) return Promise.reject(new GdrpcError(Code.NOT_FOUND, 'unknown method gdrpc.Owner/pullMany'));
        const list = method.results[0]!.type;
        return Promise.resolve({ ts: (args.xs as number[]).map((x) => make(x, list.kind === 'list' ? list.element : list)) });
      },
      close() { owner.closed += 1; return Promise.resolve(); },
    };
    return owner;
  }

  it('batches by shape, 128 at most, over one dialled connection', async () => {
    const owner = fakeOwner(false);
    // 260 handles of 8 bytes and 5 of 9: batches 128 + 128 + 4 and 5.
    const handles = fakeHandles(265, (i) => (i < 260 ? 8 : 9), owner);
    const tensors = await RemoteTensor.pullAll(handles);
    expect(owner.calls.sort()).toEqual(['pullMany:128', 'pullMany:128', 'pullMany:4', 'pullMany:5']);
    expect(owner.closed).toBe(1);
    expect(tensors.map((t) => t.bytes()[0])).toEqual(handles.map((h) => (h.wire.x as number) & 0xff));
    expect(tensors.map((t) => t.byteLength)).toEqual(handles.map((h) => h.byteLength));
  });

  it('pulls one handle at a time from an owner without pullMany, on the same connection', async () => {
    const owner = fakeOwner(true);
    const handles = fakeHandles(6, () => 4, owner);
    const tensors = await RemoteTensor.pullAll(handles);
    expect(owner.calls).toEqual(['pullMany:6', 'pull:1', 'pull:1', 'pull:1', 'pull:1', 'pull:1', 'pull:1']);
    expect(owner.closed).toBe(1);
    expect(tensors.map((t) => t.bytes()[0])).toEqual([1, 2, 3, 4, 5, 6]);
  });
});
