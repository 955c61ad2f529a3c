// RemoteTensor.pullBlocks: blocks of one remote tensor by index (a block table over a KV pool),
// as one operation. The owner (a server in its own process) hands out a [rows, cols] u16 region
// whose element (i, j) is (i * cols + j) & 0xffff, so a block in the wrong place shows. Then what a
// hostile peer can send to gdrpc.Owner/pullBlocks by hand, and the owner's bound on gather staging.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callInfo, Client, Code, GdrpcError, OwnerConnection, RemoteTensor, Runtime, Tensor, type MethodDescriptor, type TensorPool } from '../../core/index.ts';
import type { OwnerClient } from '../../core/rpc/remote/owner-client.ts';
import { MAX_BLOCK_BYTES_IN_FLIGHT, MAX_BLOCK_PULL_BYTES, MAX_BLOCKS_PER_PULL, PULL_BLOCKS_ARGS } from '../../core/rpc/remote/block-table.ts';
import { ownerMethods, OWNER_STAGING_BYTES_PER_CONNECTION, OWNER_STAGING_BYTES_PER_SERVER, type OwnerHost } from '../../core/rpc/server/owner-methods.ts';
import { IncomingTensors } from '../../core/rpc/transfer/transfer.ts';
import { lentTensor } from '../../core/rpc/remote/lent.ts';
import type { TransferScope } from '../../core/rpc/movers/mover.ts';
import type { CallContext } from '../../core/rpc/server/handler-context.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { codeOf, serverStats } from './fixtures/stats.ts';
import { invalidArgument, rejection } from './fixtures/thrown.ts';

let owner: ListeningPeer;
let client: Client;
let pool: TensorPool;

/** A handle to a rows x cols u16 region at the owner. */
async function region(rows: number, cols: number): Promise<RemoteTensor> {
  return (await client.unary(EchoDescriptor.methods.region, { rows, cols })).h as RemoteTensor;
}

/** What row `row` of a region with `cols` columns holds. */
function rowOf(row: number, cols: number): number[] {
  return Array.from({ length: cols }, (_, j) => (row * cols + j) & 0xffff);
}

/** The rows of a [n, cols] u16 tensor, as arrays. */
function rowsOf(tensor: Tensor, cols: number): number[][] {
  const values = Array.from(tensor.toArray() as Uint16Array);
  return Array.from({ length: values.length / cols }, (_, k) => values.slice(k * cols, (k + 1) * cols));
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

describe('RemoteTensor.pullBlocks', () => {
  it('pulls rows by index into a new [n, cols] tensor, in the order asked, over one connection', async () => {
    const handle = await region(1000, 40);
    const before = (await serverStats(client)).accepted;
    const asked = [999, 0, 512, 7, 7, 300];
    const tensor = await handle.pullBlocks(asked, { pool });
    try {
      expect((await serverStats(client)).accepted - before).toBe(1);
      expect(tensor.dtype).toBe('u16');
      expect(tensor.shape).toEqual([6, 40]);
      expect(tensor.pool).toBe(pool);
      expect(rowsOf(tensor, 40)).toEqual(asked.map((row) => rowOf(row, 40)));
      // One transfer: the gathered blocks as one tensor `t`.
      expect(callInfo(tensor)?.transfers.map((t) => [t.argument, t.bytes])).toEqual([['t', 6 * 80]]);
    } finally {
      tensor.release();
    }
  });

  it('places block k at block at[k] of into and leaves the others alone; the handle stays pullable', async () => {
    const handle = await region(256, 64);
    const into = Tensor.zeros([100, 64], 'u16');
    const blocks = Uint32Array.from({ length: 50 }, (_, k) => (k * 37) % 256);
    const at = Uint16Array.from({ length: 50 }, (_, k) => 99 - 2 * k);
    const landed = await handle.pullBlocks(blocks, { into, at });
    expect(landed).toBe(into);
    const rows = rowsOf(into, 64);
    for (let k = 0; k < 50; k += 1) expect(rows[99 - 2 * k], `block ${k}`).toEqual(rowOf(blocks[k]!, 64));
    for (let k = 0; k < 50; k += 1) expect(rows[98 - 2 * k], `untouched ${98 - 2 * k}`).toEqual(new Array(64).fill(0));
    // pullBlocks does not spend the handle: a second table from the same region works.
    const again = await handle.pullBlocks([3], { blockBytes: 32 });
    expect(Array.from(again.toArray() as Uint16Array)).toEqual(rowOf(0, 64).slice(48, 64));
    again.release();
    // A whole pull still works, and spends it.
    const whole = await handle.pull();
    expect(rowsOf(whole, 64)[255]).toEqual(rowOf(255, 64));
    whole.release();
  });

  it('lands straight in an into of exactly the blocks asked for, and in flat blocks of any length', async () => {
    const handle = await region(64, 16);
    const into = Tensor.zeros([4, 16], 'u16');
    await handle.pullBlocks([60, 1, 2, 3], { into });
    expect(rowsOf(into, 16)).toEqual([60, 1, 2, 3].map((row) => rowOf(row, 16)));
    // Blocks of 8 bytes (4 elements): flat [n, 4].
    const flat = await handle.pullBlocks([0, 255], { blockBytes: 8 });
    expect(flat.shape).toEqual([2, 4]);
    expect(Array.from(flat.toArray() as Uint16Array)).toEqual([0, 1, 2, 3, 1020, 1021, 1022, 1023]);
    flat.release();
  });

  it('asks in parts of partBytes, each gathered and copied to its place', async () => {
    // 9 rows of 1 MiB, each asked for twice: 18 MiB, three parts (8 blocks, 8 and 2).
    const cols = 1 << 19;
    const handle = await region(9, cols);
    const asked = [...Array.from({ length: 9 }, (_, k) => 8 - k), ...Array.from({ length: 9 }, (_, k) => k)];
    const tensor = await handle.pullBlocks(asked, { partBytes: 8 << 20 });
    try {
      expect(tensor.shape).toEqual([18, cols]);
      const values = tensor.toArray() as Uint16Array;
      for (const k of [0, 1, 7, 8, 9, 15, 16, 17]) {
        const row = asked[k]!;
        expect([values[k * cols], values[k * cols + cols - 1]], `block ${k}`).toEqual([(row * cols) & 0xffff, (row * cols + cols - 1) & 0xffff]);
      }
      expect(callInfo(tensor)?.transfers.map((t) => t.bytes).sort((a, b) => a - b)).toEqual([2 << 20, 8 << 20, 8 << 20]);
    } finally {
      tensor.release();
    }
  }, 60_000);

  it('pulls over a connection made once (connect, via): no connection per pull, open until closed', async () => {
    const handle = await region(64, 8);
    const before = (await serverStats(client)).accepted;
    const owner = await handle.connect();
    try {
      for (let k = 0; k < 5; k += 1) {
        const tensor = await handle.pullBlocks([k, 63 - k], { via: owner });
        expect(rowsOf(tensor, 8)).toEqual([rowOf(k, 8), rowOf(63 - k, 8)]);
        tensor.release();
      }
      // A pull that fails (a forged capability) leaves the shared connection open for the next.
      const forged = handle.withWire({ ...handle.wire, s: new Uint8Array(16) });
      expect(await codeOf(forged.pullBlocks([0], { via: owner }))).toBe(Code.NOT_FOUND);
      const whole = await handle.pull({ via: owner });
      expect(rowsOf(whole, 8)[63]).toEqual(rowOf(63, 8));
      whole.release();
      expect((await serverStats(client)).accepted - before).toBe(1);
      expect(owner.closed).toBe(false);
    } finally {
      await owner.close();
    }
    expect(owner.closed).toBe(true);
    const late = await rejection(handle.pullBlocks([0], { via: owner }));
    expect(late.code).toBe(Code.FAILED_PRECONDITION);
    expect(late.rawMessage).toMatch(/the connection to 127\.0\.0\.1:\d+ is closed/);
  });

  it('serves handles that came on another Client of the same runtime, and refuses a token of its own', async () => {
    const other = await Client.connect(owner.address);
    const owner1 = await (await region(8, 8)).connect();
    try {
      const handle = (await other.unary(EchoDescriptor.methods.region, { rows: 8, cols: 8 })).h as RemoteTensor;
      const tensor = await handle.pullBlocks([7], { via: owner1 });
      expect(rowsOf(tensor, 8)).toEqual([rowOf(7, 8)]);
      tensor.release();
      expect(await invalidArgument(handle.pullBlocks([7], { via: owner1, token: 'x' }))).toMatch(/presents the token given to connect/);
      expect(await invalidArgument(handle.pull({ via: owner1, token: 'x' }))).toMatch(/presents the token given to connect/);
    } finally {
      await owner1.close();
      await other.close();
    }
  });

  it('keeps at most 512 MiB of parts in flight over one connection, the rest waiting their turn in order', async () => {
    const shared = new OwnerConnection('o:1', Object.assign(async () => { throw new Error('never dialled'); }, { runtime: {} }), {} as OwnerClient);
    const order: string[] = [];
    const a = await shared.room(300 << 20);
    const b = shared.room(300 << 20).then((give) => { order.push('b'); return give; });
    const c = shared.room(100 << 20).then((give) => { order.push('c'); return give; });
    await new Promise((resolve) => setImmediate(resolve));
    expect(order).toEqual([]);  // c would fit, but waits behind b
    a();
    a();  // giving back twice gives back once
    const giveB = await b;
    const giveC = await c;
    expect(order).toEqual(['b', 'c']);
    giveB();
    giveC();
    await expect(shared.room(512 << 20)).resolves.toBeTypeOf('function');
  });

  it('refuses a connection to another owner as via', async () => {
    const handle = await region(4, 4);
    const owner = await handle.connect();
    try {
      const elsewhere = handle.withWire({ ...handle.wire, o: '127.0.0.1:9' });
      expect(await invalidArgument(elsewhere.pullBlocks([0], { via: owner }))).toMatch(/owned by 127\.0\.0\.1:9 cannot be pulled via the connection to 127\.0\.0\.1:\d+/);
      expect(await invalidArgument(elsewhere.pull({ via: owner }))).toMatch(/cannot be pulled via/);
      expect(await invalidArgument(handle.pull({ via: {} as never }))).toMatch(/via/);
    } finally {
      await owner.close();
    }
  });

  it(`asks for at most ${MAX_BLOCKS_PER_PULL} blocks a part, however small the blocks`, async () => {
    const handle = await region(20_000, 1);  // 20,000 blocks of 2 bytes
    const asked = Array.from({ length: 20_000 }, (_, k) => 19_999 - k);
    const tensor = await handle.pullBlocks(asked);
    try {
      expect(callInfo(tensor)?.transfers.map((t) => t.bytes).sort((a, b) => a - b)).toEqual([2 * (20_000 - MAX_BLOCKS_PER_PULL), 2 * MAX_BLOCKS_PER_PULL]);
      const values = tensor.toArray() as Uint16Array;
      expect([values[0], values[16_383], values[16_384], values[19_999]]).toEqual([19_999, 19_999 - 16_383, 19_999 - 16_384, 0]);
    } finally {
      tensor.release();
    }
  });

  it('refuses bad tables before connecting: indices out of range or not integers, at without into, twice or out of into, blocks that do not tile', async () => {
    const handle = await region(10, 4);
    const before = (await serverStats(client)).accepted;
    const into = Tensor.zeros([5, 4], 'u16');
    expect(await invalidArgument(handle.pullBlocks([]))).toMatch(/blocks must list one or more blocks/);
    expect(await invalidArgument(handle.pullBlocks([10]))).toMatch(/blocks\[0\] = 10 is not a block index below 10/);
    expect(await invalidArgument(handle.pullBlocks([1, 2.5]))).toMatch(/blocks\[1\] = 2.5/);
    expect(await invalidArgument(handle.pullBlocks([1, -1]))).toMatch(/blocks\[1\] = -1/);
    expect(await invalidArgument(handle.pullBlocks([1], { at: [0] }))).toMatch(/at places blocks in into, and there is none/);
    expect(await invalidArgument(handle.pullBlocks([1, 2], { into, at: [3, 3] }))).toMatch(/at\[1\] = 3 names a block of into a second time/);
    expect(await invalidArgument(handle.pullBlocks([1, 2], { into, at: [3] }))).toMatch(/1 places in at for 2 blocks/);
    expect(await invalidArgument(handle.pullBlocks([1], { into, at: [5] }))).toMatch(/at\[0\] = 5 is not a block index below 5/);
    expect(await invalidArgument(handle.pullBlocks([1, 2, 3, 4, 5, 6], { into }))).toMatch(/into holds 5 blocks, 6 were asked for/);
    expect(await invalidArgument(handle.pullBlocks([1], { into: Tensor.zeros([5, 4], 'f32') }))).toMatch(/into must be a live u16 tensor/);
    expect(await invalidArgument(handle.pullBlocks([1], { blockBytes: 6 }))).toMatch(/blocks of 6 bytes do not tile the 80-byte u16 tensor/);
    expect(await invalidArgument(handle.pullBlocks([1], { blockBytes: 3 }))).toMatch(/blocks of 3 bytes do not tile/);
    expect(await invalidArgument(handle.pullBlocks([1], { maxInFlight: 0 }))).toMatch(/maxInFlight/);
    expect(await invalidArgument(handle.pullBlocks([1], { partBytes: 0 }))).toMatch(/partBytes/);
    expect(await invalidArgument(handle.pullBlocks([1], { partBytes: MAX_BLOCK_PULL_BYTES + 1 }))).toMatch(/partBytes/);
    expect(await invalidArgument(handle.pullBlocks([1], { partBytes: 4 }))).toMatch(/blocks of 8 bytes do not fit parts of 4/);
    expect(await invalidArgument(handle.pullBlocks([1], { partBytes: 64 << 20, maxInFlight: 5 }))).toMatch(new RegExp(`5 parts of 67108864 bytes in flight are over the ${MAX_BLOCK_BYTES_IN_FLIGHT} bytes`));
    expect(await invalidArgument(handle.pullBlocks('0' as unknown as number[]))).toMatch(/blocks must list one or more blocks/);
    expect((await serverStats(client)).accepted).toBe(before);
    // Nothing was spent: the same handle pulls fine.
    const tensor = await handle.pullBlocks([9]);
    expect(rowsOf(tensor, 4)).toEqual([rowOf(9, 4)]);
    tensor.release();
  });
});

describe('gdrpc.Owner/pullBlocks called by hand (what a hostile peer can send)', () => {
  const method: MethodDescriptor = { name: 'pullBlocks', service: 'gdrpc.Owner', clientStreaming: false, serverStreaming: false, args: PULL_BLOCKS_ARGS, results: [] };
  const le = (indices: number[]): Uint8Array => {
    const bytes = new Uint8Array(indices.length * 4);
    for (const [k, index] of indices.entries()) new DataView(bytes.buffer).setUint32(k * 4, index, true);
    return bytes;
  };

  it('refuses torn index lists, indices past the tensor, blocks that do not tile and gathers over the limit; the owner carries on', async () => {
    const handle = await region(16, 8);  // 16 blocks of 16 bytes
    const ask = (b: number, r: Uint8Array): Promise<string> => invalidArgument(client.unary(method, { x: handle.wire.x!, s: handle.wire.s!, b, r }));
    expect(await ask(16, new Uint8Array(0))).toMatch(/one or more little-endian u32 block indices, got 0 bytes/);
    expect(await ask(16, new Uint8Array(7))).toMatch(/got 7 bytes/);
    expect(await ask(16, le([3, 16]))).toMatch(/block index 16 \(at 1\) is outside the 16 blocks/);
    expect(await ask(16, le([0xffffffff]))).toMatch(/block index 4294967295/);
    expect(await ask(0, le([0]))).toMatch(/blocks of 0 bytes do not tile/);
    expect(await ask(5, le([0]))).toMatch(/blocks of 5 bytes do not tile/);
    const big = await region(16, 4096);  // 16 blocks of 8 KiB: 8,193 of them are over 64 MiB
    expect(await invalidArgument(client.unary(method, { x: big.wire.x!, s: big.wire.s!, b: 8192, r: le(new Array(MAX_BLOCK_PULL_BYTES / 8192 + 1).fill(0)) }))).toMatch(/gathers at most 67108864 bytes a call/);
    // Tiny blocks: the count is bounded before the indices are read, not only the bytes.
    expect(await ask(16, le(new Array(MAX_BLOCKS_PER_PULL + 1).fill(0)))).toMatch(/gathers at most 16384 blocks a call, got 16385/);
    const tensor = await handle.pullBlocks([15, 0]);
    expect(rowsOf(tensor, 8)).toEqual([rowOf(15, 8), rowOf(0, 8)]);
    tensor.release();
  });

  it('answers NOT_FOUND for a forged capability or an unknown handle, and the handle still works', async () => {
    const handle = await region(4, 4);
    expect(await codeOf(client.unary(method, { x: handle.wire.x!, s: new Uint8Array(16), b: 8, r: le([0]) }))).toBe(Code.NOT_FOUND);
    expect(await codeOf(client.unary(method, { x: 0x7ffffff0, s: handle.wire.s!, b: 8, r: le([0]) }))).toBe(Code.NOT_FOUND);
    const tensor = await handle.pullBlocks([3]);
    expect(rowsOf(tensor, 4)).toEqual([rowOf(3, 4)]);
    tensor.release();
  });
});

describe('owner gather staging and exposure checks (a fake host)', () => {
  /** The owner's pullBlocks over a fake host: gathers from a `sourceBytes` host tensor and finish
   *  only when `finish()` says (each runs the owner's `before` check then, as a copier's turn does);
   *  `exposed = false` makes the handle's lookup fail, as after the exposing call ended. */
  function fakeOwner(sourceBytes: number) {
    const source = { dtype: 'u8', shape: [sourceBytes], byteLength: sourceBytes, device: 'cpu' } as unknown as Tensor;
    const state = { exposed: true, released: 0 };
    const waiting: Array<() => void> = [];
    const host: OwnerHost = {
      lookup: () => {
        if (!state.exposed) throw new GdrpcError(Code.NOT_FOUND, 'remote tensor 1 is unknown or has been released');
        return source;
      },
      claim: () => { throw new Error('pullBlocks does not claim its handle'); },
      staging: () => ({ allocate: (shape: number[]) => ({ byteLength: shape[0]! * shape[1]!, release: () => { state.released += 1; } }) }) as unknown as TensorPool,
      copyBlocks: (_bytes, _copies, options) => new Promise<void>((resolve, reject) => waiting.push(() => {
        try {
          options?.before?.();
          resolve();
        } catch (error) {
          reject(error);
        }
      })),
      directPulls: false,
    };
    const handler = ownerMethods(host).find((e) => e.method.name === 'pullBlocks')!.handler as (a: object, c: CallContext) => Promise<unknown>;
    const hooks = new Map<string, Array<() => void>>();
    /** One call from connection `peer` gathering `bytes` (1,024 blocks, all block 0). */
    const call = (peer: string, k: number, bytes: number): Promise<unknown> => {
      const list: Array<() => void> = [];
      hooks.set(`${peer}#${k}`, list);
      const ctx = { peer, afterSend: (fn: () => void) => list.push(fn) } as unknown as CallContext;
      return handler({ x: 1, s: new Uint8Array(16), b: bytes / 1024, r: new Uint8Array(4 * 1024) }, ctx);
    };
    const finish = (): void => { for (const go of waiting.splice(0)) go(); };
    const end = (peer: string, k: number): void => { for (const fn of hooks.get(`${peer}#${k}`) ?? []) fn(); };
    return { state, call, finish, end };
  }

  it(`holds at most ${OWNER_STAGING_BYTES_PER_CONNECTION >> 20} MiB per connection: a gather over it is refused RESOURCE_EXHAUSTED until staging is freed`, async () => {
    const owner = fakeOwner(8 << 20);
    const budget = OWNER_STAGING_BYTES_PER_CONNECTION / (8 << 20);
    const running = Array.from({ length: budget }, (_, k) => owner.call('a:1', k, 8 << 20));
    const refused = await rejection(owner.call('a:1', budget, 8 << 20));
    expect(refused.code).toBe(Code.RESOURCE_EXHAUSTED);
    expect(refused.rawMessage).toMatch(/over 536870912 bytes of staging for this connection/);
    // Another connection has a budget of its own.
    const other = owner.call('b:2', 0, 8 << 20);
    owner.finish();
    await Promise.all([...running, other]);
    // Staging is freed once each call is over; then the connection may gather again.
    for (let k = 0; k < budget; k += 1) owner.end('a:1', k);
    expect(owner.state.released).toBe(budget);
    const again = owner.call('a:1', budget + 1, 8 << 20);
    owner.finish();
    await expect(again).resolves.toBeDefined();
  });

  it(`holds at most ${OWNER_STAGING_BYTES_PER_SERVER / 2 ** 20} MiB over all connections`, async () => {
    const owner = fakeOwner(64 << 20);
    const perConnection = OWNER_STAGING_BYTES_PER_CONNECTION / (64 << 20);
    const total = OWNER_STAGING_BYTES_PER_SERVER / (64 << 20);
    const running = Array.from({ length: total }, (_, k) => owner.call(`p:${Math.floor(k / perConnection)}`, k, 64 << 20));
    // A fresh connection, within its own budget, is refused: the server's is spent.
    const refused = await rejection(owner.call('fresh:1', 0, 64 << 20));
    expect(refused.code).toBe(Code.RESOURCE_EXHAUSTED);
    expect(refused.rawMessage).toMatch(/over 2147483648 bytes of staging on this server/);
    owner.finish();
    await Promise.all(running);
    for (let k = 0; k < total; k += 1) owner.end(`p:${Math.floor(k / perConnection)}`, k);
    const again = owner.call('fresh:1', 1, 64 << 20);
    owner.finish();
    await expect(again).resolves.toBeDefined();
  });

  it('checks the handle again when the gather gets its turn: an exposure that ended meanwhile fails it NOT_FOUND and frees its staging', async () => {
    const owner = fakeOwner(1 << 20);
    const queued = owner.call('a:1', 0, 1 << 20);
    await new Promise((resolve) => setImmediate(resolve));
    owner.state.exposed = false;  // the exposing call ended while the gather waited
    owner.finish();
    expect(await codeOf(queued)).toBe(Code.NOT_FOUND);
    owner.end('a:1', 0);
    expect(owner.state.released).toBe(1);
  });
});

describe('a failed receive into the caller\'s tensor', () => {
  it('releases what it allocated but not the tensors the caller lent (pull into, pullBlocks into)', () => {
    const incoming = new IncomingTensors({} as TransferScope, { maxTensor: 1 << 20 }, { side: 'client', label: 'test.' } as never);
    const lent = lentTensor(Tensor.zeros([4], 'u8'));
    const own = Tensor.zeros([4], 'u8');
    incoming.allocated.push(lent, own);
    incoming.releaseAll();
    expect([lent.released, own.released]).toEqual([false, true]);
  });
});
