// RemoteTensor.pullBlocks: blocks of one remote tensor by index (a block table over a KV pool),
// as one operation. The owner (a server in its own process) hands out a [rows, cols] u16 region
// whose element (i, j) is (i * cols + j) & 0xffff, so a block in the wrong place shows. Then what a
// hostile peer can send to gdrpc.Owner/pullBlocks by hand, and the owner's bound on gather staging.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callInfo, Client, Code, RemoteTensor, Runtime, Tensor, type MethodDescriptor, type TensorPool } from '../../core/index.ts';
import { MAX_BLOCK_PULL_BYTES, PULL_BLOCKS_ARGS } from '../../core/rpc/remote/remote.ts';
import { ownerMethods, OWNER_STAGING_BYTES_PER_CONNECTION } from '../../core/rpc/server/owner-methods.ts';
import type { CallContext } from '../../core/rpc/server/server-call.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { codeOf, serverStats } from './fixtures/stats.ts';
import { rejection } from './fixtures/thrown.ts';

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

async function invalidArgument(promise: Promise<unknown>): Promise<string> {
  const error = await rejection(promise);
  expect(error.code).toBe(Code.INVALID_ARGUMENT);
  return error.rawMessage;
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
    expect(await ask(256, le(new Array(MAX_BLOCK_PULL_BYTES / 256 + 1).fill(0)))).toMatch(/gathers at most 67108864 bytes a call/);
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

describe('owner gather staging per connection', () => {
  it(`holds at most ${OWNER_STAGING_BYTES_PER_CONNECTION >> 20} MiB per connection: a gather over it is refused RESOURCE_EXHAUSTED until staging is freed`, async () => {
    // A fake host whose gathers finish only when told, and an 8 MiB tensor to gather from.
    const source = { dtype: 'u8', shape: [8 << 20], byteLength: 8 << 20, device: 'cpu' } as unknown as Tensor;
    const finishers: Array<() => void> = [];
    const released: number[] = [];
    const [, , , pullBlocks] = ownerMethods({
      lookup: () => ({ tensor: source, pulled: () => undefined }),
      staging: () => ({ allocate: (shape: number[]) => ({ byteLength: shape[0]! * shape[1]!, release: () => released.push(1) }) }) as unknown as TensorPool,
      copyBlocks: () => new Promise<void>((resolve) => finishers.push(resolve)),
    });
    const hooks = new Map<string, Array<() => void>>();
    const contextOf = (peer: string, call: number): CallContext => {
      const list: Array<() => void> = [];
      hooks.set(`${peer}#${call}`, list);
      return { peer, afterSend: (fn: () => void) => list.push(fn) } as unknown as CallContext;
    };
    const whole = new Uint8Array(4 * (8 << 10));  // 8,192 indices of block 0: 8 MiB in blocks of 1 KiB
    const call = (peer: string, k: number): Promise<unknown> => Promise.resolve((pullBlocks!.handler as (a: object, c: CallContext) => Promise<unknown>)({ x: 1, s: new Uint8Array(16), b: 1024, r: whole }, contextOf(peer, k)));
    const budget = OWNER_STAGING_BYTES_PER_CONNECTION / (8 << 20);
    const running = Array.from({ length: budget }, (_, k) => call('a:1', k));
    const refused = await rejection(call('a:1', budget) as Promise<unknown>);
    expect(refused.code).toBe(Code.RESOURCE_EXHAUSTED);
    expect(refused.rawMessage).toMatch(/over 536870912 bytes of staging for this connection/);
    // Another connection has a budget of its own.
    const other = call('b:2', 0);
    for (const finish of finishers.splice(0)) finish();
    await Promise.all([...running, other]);
    // Staging is freed once each call is over; then the connection may gather again.
    for (let k = 0; k < budget; k += 1) for (const fn of hooks.get(`a:1#${k}`)!) fn();
    expect(released).toHaveLength(budget);
    const again = call('a:1', budget + 1);
    for (const finish of finishers.splice(0)) finish();
    await expect(again).resolves.toBeDefined();
  });
});
