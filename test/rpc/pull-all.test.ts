// RemoteTensor.pullAll: many handles as one operation. The owner (a server in its own process)
// hands out handles as results; pulling them all opens one connection to it, not one per handle,
// asks for handles of one shape in batches (gdrpc.Owner/pullStacked: gathered by the owner into one
// tensor, one message), brings every byte back in order, and a failure in the middle leaves nothing
// allocated. A fake owner shows the batching and the fallbacks for an owner without pullStacked
// (pullMany: a tensor per handle) or without either (a pull per handle).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callInfo, Client, Code, copyBlocks, GdrpcError, RemoteTensor, Runtime, Tensor, type MethodDescriptor, type TensorPool } from '../../core/index.ts';
import { MAX_STACKED_BLOCK_BYTES, PULL_MANY_ARGS } from '../../core/rpc/remote/remote.ts';
import type { OwnerClient, OwnerDialer } from '../../core/rpc/remote/owner-client.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { codeOf, serverStats } from './fixtures/stats.ts';
import { invalidArgument, rejection } from './fixtures/thrown.ts';
import { patterned } from './fixtures/tensors.ts';

let owner: ListeningPeer;
let client: Client;
let pool: TensorPool;


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

  it('asks for handles of one shape in batches of 128 (gdrpc.Owner/pullStacked), one message each, over one connection', async () => {
    const handles = await share(300, 2048, true);
    const before = (await serverStats(client)).accepted;
    const tensors = await RemoteTensor.pullAll(handles);
    try {
      expect((await serverStats(client)).accepted - before).toBe(1);
      for (const [i, tensor] of tensors.entries()) {
        expect(tensor.equals(patterned(2048, i)), `handle ${i}`).toBe(true);
        expect(tensor.shape).toEqual([2048]);
        // Each tensor carries its batch's report: one transfer, the stacked tensor of 128, 128 and 44 blocks.
        expect(callInfo(tensor)?.transfers.map((t) => [t.argument, t.bytes])).toEqual([['t', (i < 256 ? 128 : 44) * 2048]]);
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

describe.each(['pullMany', 'pullStacked'])('gdrpc.Owner/%s called by hand (what a hostile peer can send)', (name) => {
  const method: MethodDescriptor = { name, service: 'gdrpc.Owner', clientStreaming: false, serverStreaming: false, args: PULL_MANY_ARGS, results: [] };
  const asked = (handles: RemoteTensor[]) => ({ xs: handles.map((h) => h.wire.x!), ss: handles.map((h) => h.wire.s!) });

  it('refuses mismatched lists, empty or oversized batches and mixed shapes, spending nothing', async () => {
    const handles = await share(3, 16);  // 16, 17 and 18 bytes
    const refusal = (args: Record<string, unknown>): Promise<string> => invalidArgument(client.unary(method, args));
    expect(await refusal({ xs: [handles[0]!.wire.x!], ss: [] })).toMatch(/1 handles but 0 capabilities/);
    expect(await refusal({ xs: [], ss: [] })).toMatch(/takes 1 to 1024 handles, got 0/);
    expect(await refusal({ xs: new Array(1025).fill(1), ss: new Array(1025).fill(new Uint8Array(16)) })).toMatch(/got 1025/);
    expect(await refusal(asked(handles))).toMatch(/handle 1 is not a u8 \[16\] tensor like the first/);
    const tensors = await RemoteTensor.pullAll(handles);
    expect(tensors.map((t) => t.byteLength)).toEqual([16, 17, 18]);
    for (const tensor of tensors) tensor.release();
  });

  it('answers NOT_FOUND for a forged capability or an unknown handle among good ones, spending none of them', async () => {
    const handles = await share(4, 32, true);
    const forged = asked(handles);
    forged.ss[2] = new Uint8Array(16);
    expect(await codeOf(client.unary(method, forged))).toBe(Code.NOT_FOUND);
    const unknown = asked(handles);
    unknown.xs[3] = 0x7fffffff;
    expect(await codeOf(client.unary(method, unknown))).toBe(Code.NOT_FOUND);
    const tensors = await RemoteTensor.pullAll(handles);
    expect(tensors.map((t, k) => t.equals(patterned(32, k)))).toEqual([true, true, true, true]);
    for (const tensor of tensors) tensor.release();
  });
});

describe('gdrpc.Owner/pullStacked called by hand', () => {
  it('refuses to gather handles over 1 MiB (its staging tensor stays bounded), spending nothing', async () => {
    const method: MethodDescriptor = { name: 'pullStacked', service: 'gdrpc.Owner', clientStreaming: false, serverStreaming: false, args: PULL_MANY_ARGS, results: [] };
    const handles = await share(2, MAX_STACKED_BLOCK_BYTES + 1, true);
    const message = await invalidArgument(client.unary(method, { xs: handles.map((h) => h.wire.x!), ss: handles.map((h) => h.wire.s!) }));
    expect(message).toMatch(/at most 1048576 bytes, these hold 1048577; pull them with pullMany/);
    const tensors = await RemoteTensor.pullAll(handles);
    expect(tensors.map((t, k) => t.equals(patterned(MAX_STACKED_BLOCK_BYTES + 1, k)))).toEqual([true, true]);
    for (const tensor of tensors) tensor.release();
  });
});

describe('RemoteTensor.pullAll against a fake owner', () => {
  /** Handles of `bytes` bytes each at owner "fake:1", pulled through `client`. */
  function fakeHandles(count: number, bytes: (i: number) => number, client: OwnerClient): RemoteTensor[] {
    const dial: OwnerDialer = () => Promise.resolve(client);
    return Array.from({ length: count }, (_, i) => new RemoteTensor({ dt: 'u8', sh: [bytes(i)], n: bytes(i), mt: 'host', m: 'h', o: 'fake:1', x: i + 1, s: new Uint8Array(16) }, dial));
  }

  /** An owner that answers pull and the batch methods in `knows`, with tensors whose first byte
   *  is x (pullStacked: block k of the stacked tensor starts with the k-th x). */
  function fakeOwner(knows: ReadonlyArray<'pullMany' | 'pullStacked'>): OwnerClient & { calls: string[]; closed: number } {
    const owner = {
      calls: [] as string[],
      closed: 0,
      unary(method: MethodDescriptor, args: Record<string, unknown>) {
        owner.calls.push(`${method.name}:${method.name === 'pull' ? 1 : (args.xs as number[]).length}`);
        const shapeOf = (type: MethodDescriptor['results'][number]['type']) => (type.kind === 'tensor' ? type.shape.map((d) => (d.kind === 'fixed' ? d.size : 0)) : []);
        const make = (x: number, type: MethodDescriptor['results'][number]['type']) => {
          const t = Tensor.zeros(shapeOf(type), 'u8');
          t.bytes()[0] = x;
          return t;
        };
        if (method.name === 'pull') return Promise.resolve({ t: make(args.x as number, method.results[0]!.type) });
        if (!(knows as readonly string[]).includes(method.name)) return Promise.reject(new GdrpcError(Code.NOT_FOUND, `unknown method gdrpc.Owner/${method.name}`));
        const type = method.results[0]!.type;
        const xs = args.xs as number[];
        if (method.name === 'pullMany') return Promise.resolve({ ts: xs.map((x) => make(x, type.kind === 'list' ? type.element : type)) });
        const stacked = Tensor.zeros(shapeOf(type), 'u8');
        const block = stacked.byteLength / xs.length;
        for (const [k, x] of xs.entries()) stacked.bytes()[k * block] = x;
        return Promise.resolve({ t: stacked });
      },
      copyBlocks,
      staging: () => { throw new Error('pullAll takes no staging of its own'); },
      close() { owner.closed += 1; return Promise.resolve(); },
    };
    return owner;
  }

  it('batches by shape, 128 at most, over one dialled connection, each batch one stacked tensor', async () => {
    const owner = fakeOwner(['pullMany', 'pullStacked']);
    // 260 handles of 8 bytes and 5 of 9: batches 128 + 128 + 4 and 5.
    const handles = fakeHandles(265, (i) => (i < 260 ? 8 : 9), owner);
    const tensors = await RemoteTensor.pullAll(handles);
    expect(owner.calls.sort()).toEqual(['pullStacked:128', 'pullStacked:128', 'pullStacked:4', 'pullStacked:5']);
    expect(owner.closed).toBe(1);
    expect(tensors.map((t) => t.bytes()[0])).toEqual(handles.map((h) => (h.wire.x as number) & 0xff));
    expect(tensors.map((t) => t.byteLength)).toEqual(handles.map((h) => h.byteLength));
  });

  it('moves a lone handle and handles over 1 MiB as themselves (pullMany), not stacked', async () => {
    const owner = fakeOwner(['pullMany', 'pullStacked']);
    const big = fakeHandles(3, () => MAX_STACKED_BLOCK_BYTES + 1, owner);
    const lone = fakeHandles(1, () => 8, owner);
    const at = fakeHandles(2, () => MAX_STACKED_BLOCK_BYTES, owner);
    for (const handles of [big, lone, at]) for (const tensor of await RemoteTensor.pullAll(handles)) tensor.release();
    expect(owner.calls).toEqual(['pullMany:3', 'pullMany:1', 'pullStacked:2']);
  });

  it('asks an owner without pullStacked for a tensor per handle (pullMany) from then on', async () => {
    const owner = fakeOwner(['pullMany']);
    const handles = fakeHandles(300, () => 8, owner);
    const tensors = await RemoteTensor.pullAll(handles, { maxInFlight: 128 });
    expect(owner.calls).toEqual(['pullStacked:128', 'pullMany:128', 'pullMany:128', 'pullMany:44']);
    expect(tensors.map((t) => t.bytes()[0])).toEqual(handles.map((h) => (h.wire.x as number) & 0xff));
  });

  it('pulls one handle at a time from an owner with neither batch method, on the same connection', async () => {
    const owner = fakeOwner([]);
    const handles = fakeHandles(6, () => 4, owner);
    const tensors = await RemoteTensor.pullAll(handles);
    expect(owner.calls).toEqual(['pullStacked:6', 'pullMany:6', 'pull:1', 'pull:1', 'pull:1', 'pull:1', 'pull:1', 'pull:1']);
    expect(owner.closed).toBe(1);
    expect(tensors.map((t) => t.bytes()[0])).toEqual([1, 2, 3, 4, 5, 6]);
  });
});
