// Memory admission: an argument tensor that does not fit in the server's pool waits (first come,
// first served, bounded by the call's deadline and poolWaitMs) for blocks other calls free, and
// fails RESOURCE_EXHAUSTED, saying whose pool and which option, only when it cannot be served.
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { Client, Code, cuda, GdrpcError, type Tensor } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { TestClients } from './fixtures/clients.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { expectPoolsEmpty, serverStats } from './fixtures/stats.ts';
import { byteSum, patterned } from './fixtures/tensors.ts';

const MiB = 1 << 20;
const clients = new TestClients();
const gpu = cuda.available() && cuda.deviceCount() > 0;
if (!gpu) console.log(`test/rpc/admission: the CUDA pool case is skipped, no GPU (${cuda.unavailableReason() ?? 'no device'})`);

const connect = (server: ListeningPeer): Promise<Client> => clients.connect(server.address, { poolBytes: 0 });

async function failure(promise: Promise<unknown>): Promise<GdrpcError> {
  const error = await promise.then(() => undefined, (e: unknown) => e);
  expect(error).toBeInstanceOf(GdrpcError);
  return error as GdrpcError;
}

/** Resolves once the server has this many allocations waiting for pool memory. */
async function waitingAtServer(client: Client, count: number): Promise<void> {
  await expect.poll(async () => (await serverStats(client)).pools.reduce((n, pool) => n + ((pool as { waiting?: number }).waiting ?? 0), 0), { timeout: 20_000, interval: 20 }).toBe(count);
}

/** `calls` calls by two callers back to back, each given a fresh 16 MiB patterned tensor; returns
 *  what failed (an error or a failed check inside `call`). */
async function backToBack(calls: number, call: (x: Tensor, i: number) => Promise<void>): Promise<string[]> {
  const failures: string[] = [];
  const caller = async (first: number): Promise<void> => {
    for (let i = first; i < first + calls / 2; i += 1) {
      const x = patterned(16 * MiB, i);
      try {
        await call(x, i);
      } catch (error) {
        failures.push(`call ${i}: ${(error as Error).message}`);
      }
      x.release();
    }
  };
  await Promise.all([caller(0), caller(calls / 2)]);
  return failures;
}

afterEach(async () => {
  await clients.closeAll();
  await disposePeers();
});
afterAll(async () => { await disposePeers(); });

describe('memory admission', () => {
  it('back-to-back calls whose arguments fill the pool never fail: each waits for a block to come back', async () => {
    // 16 MiB arguments in a 24 MiB pool, two callers back to back (100 calls): a call's block can
    // only be carved once another call's block (held until its echoed result has left) is back.
    await using server = await startServer({ poolBytes: 24 * MiB, maxTensorBytes: 32 * MiB });
    const client = await connect(server);
    const failures = await backToBack(100, async (x, i) => {
      const result = await client.unary(EchoDescriptor.methods.echo, { x, tag: String(i) });
      const y = result.y as Tensor;
      if (i % 10 === 0) expect(byteSum(y)).toBe(byteSum(x));
      y.release();
    });
    expect(failures).toEqual([]);
    await expectPoolsEmpty(client);
  }, 180_000);

  it('a tensor that does not fit waits for a release, then is served', async () => {
    await using server = await startServer({ poolBytes: 8 * MiB, maxTensorBytes: 8 * MiB });
    const client = await connect(server);
    const first = patterned(6 * MiB, 1);
    const second = patterned(6 * MiB, 2);
    const holding = client.unary(EchoDescriptor.methods.hold, { x: first, ms: 300 });
    await expect.poll(async () => (await serverStats(client)).runs.hold ?? 0, { timeout: 20_000, interval: 20 }).toBe(1);
    const waiting = client.unary(EchoDescriptor.methods.checksum, { x: second });
    const [held, checked] = await Promise.all([holding, waiting]);
    expect(held.sum).toBe(byteSum(first));
    expect(checked.sum).toBe(byteSum(second));
    await expectPoolsEmpty(client);
  });

  it('the call\'s deadline ends the wait: DEADLINE_EXCEEDED, and the waiter is gone from the server', async () => {
    await using server = await startServer({ poolBytes: 8 * MiB, maxTensorBytes: 8 * MiB });
    const client = await connect(server);
    const stop = new AbortController();
    const holding = client.unary(EchoDescriptor.methods.hold, { x: patterned(6 * MiB), ms: 60_000 }, { signal: stop.signal }).catch((e: GdrpcError) => e);
    await expect.poll(async () => (await serverStats(client)).runs.hold ?? 0, { timeout: 20_000, interval: 20 }).toBe(1);
    const error = await failure(client.unary(EchoDescriptor.methods.checksum, { x: patterned(6 * MiB) }, { deadline: 300 }));
    expect(error.code).toBe(Code.DEADLINE_EXCEEDED);
    await waitingAtServer(client, 0);
    stop.abort();
    expect((await holding as GdrpcError).code).toBe(Code.CANCELLED);
    await expectPoolsEmpty(client);
  });

  it('RESOURCE_EXHAUSTED names the server\'s pool and its options: at once when it can never fit, after poolWaitMs otherwise', async () => {
    await using server = await startServer({ poolBytes: 4 * MiB, maxTensorBytes: 16 * MiB, poolWaitMs: 100 });
    const client = await connect(server);
    const never = await failure(client.unary(EchoDescriptor.methods.checksum, { x: patterned(8 * MiB) }));
    expect(never.code).toBe(Code.RESOURCE_EXHAUSTED);
    expect(never.message).toMatch(/^\[RESOURCE_EXHAUSTED\] server tensor pool on cpu/);
    expect(never.message).toMatch(/never fit/);
    expect(never.message).toMatch(/poolBytes/);
    expect(never.message).toMatch(/allowPoolOverflow/);
    // Retrying cannot help a tensor larger than the whole pool.
    expect(never.details).toMatchObject({ side: 'server', retryable: false, requested: 8 * MiB, capacity: 4 * MiB, options: ['poolBytes', 'allowPoolOverflow'] });

    const stop = new AbortController();
    const holding = client.unary(EchoDescriptor.methods.hold, { x: patterned(3 * MiB), ms: 60_000 }, { signal: stop.signal }).catch((e: GdrpcError) => e);
    await expect.poll(async () => (await serverStats(client)).runs.hold ?? 0, { timeout: 20_000, interval: 20 }).toBe(1);
    const expired = await failure(client.unary(EchoDescriptor.methods.checksum, { x: patterned(3 * MiB) }));
    expect(expired.code).toBe(Code.RESOURCE_EXHAUSTED);
    expect(expired.message).toMatch(/waited \d+ ms/);
    expect(expired.message).toMatch(/poolWaitMs 100/);
    expect(expired.details).toMatchObject({ side: 'server', retryable: true, requested: 3 * MiB, capacity: 4 * MiB, options: ['poolBytes', 'poolWaitMs', 'allowPoolOverflow'] });
    stop.abort();
    await holding;
    // The connection is healthy: the next call goes through.
    expect((await client.unary(EchoDescriptor.methods.ping, { n: 7 })).n).toBe(7);
    await expectPoolsEmpty(client);
  });

  it('over poolQueueBytes a tensor is refused at once, retryable and unrun; another connection may still queue', async () => {
    await using server = await startServer({ poolBytes: 8 * MiB, maxTensorBytes: 8 * MiB, poolQueueBytes: 4 * MiB });
    const busy = await connect(server);
    const other = await connect(server);
    const stop = new AbortController();
    const holding = busy.unary(EchoDescriptor.methods.hold, { x: patterned(6 * MiB), ms: 60_000 }, { signal: stop.signal }).catch((e: GdrpcError) => e);
    await expect.poll(async () => (await serverStats(busy)).runs.hold ?? 0, { timeout: 20_000, interval: 20 }).toBe(1);
    // 4 MiB waits: the queue is full.
    const queued = busy.unary(EchoDescriptor.methods.checksum, { x: patterned(4 * MiB, 1) });
    await waitingAtServer(busy, 1);
    const refused = await failure(busy.unary(EchoDescriptor.methods.checksum, { x: patterned(3 * MiB, 2) }, { deadline: 60_000 }));
    expect(refused.code).toBe(Code.RESOURCE_EXHAUSTED);
    expect(refused.message).toMatch(/^\[RESOURCE_EXHAUSTED\] server tensor pool on cpu is busy: Echo\.checksum arguments\.x \(3145728 bytes \(3 MiB\)\) would wait behind 4194304 bytes \(4 MiB\) in 1 tensor\(s\) already waiting/);
    expect(refused.message).toMatch(/poolQueueBytes 4194304/);
    expect(refused.details).toMatchObject({ side: 'server', retryable: true, requested: 3 * MiB, queuedBytes: 4 * MiB, queued: 1, queueLimit: 4 * MiB, options: ['poolBytes', 'poolQueueBytes'] });
    // The other connection has nothing waiting: it may queue behind (3 MiB does not fit in the
    // 2 MiB left, and the queue is over its limit), and is served in turn.
    const fair = other.unary(EchoDescriptor.methods.checksum, { x: patterned(3 * MiB, 3) });
    await waitingAtServer(busy, 2);
    stop.abort();
    expect((await holding as GdrpcError).code).toBe(Code.CANCELLED);
    expect((await queued).sum).toBe(byteSum(patterned(4 * MiB, 1)));
    expect((await fair).sum).toBe(byteSum(patterned(3 * MiB, 3)));
    await expectPoolsEmpty(busy);
  });

  it('a connection over its share of the pool lets another connection\'s tensor go first', async () => {
    await using server = await startServer({ poolBytes: 32 * MiB, maxTensorBytes: 16 * MiB, maxPoolBytesPerConnection: 16 * MiB });
    const greedy = await connect(server);
    const other = await connect(server);
    const stop = new AbortController();
    // Alone, greedy fills the pool: 4 x 8 MiB, the first held briefly, the others until the end;
    // its fifth waits.
    const holds = [500, 60_000, 60_000, 60_000, 0];
    const greedyCalls = holds.map((ms, i) => greedy.unary(EchoDescriptor.methods.hold, { x: patterned(8 * MiB, i), ms }, { signal: stop.signal })
      .then(() => 'OK', (e: GdrpcError) => e.code));
    await waitingAtServer(other, 1);
    // Other's tensor arrives after greedy's fifth; greedy holds twice its share, so the block the
    // first hold frees goes to other (first come, first served would give it to greedy's fifth,
    // and other would wait for blocks that are held to the end).
    const result = await other.unary(EchoDescriptor.methods.checksum, { x: patterned(8 * MiB, 9) });
    expect(result.sum).toBe(byteSum(patterned(8 * MiB, 9)));
    stop.abort();
    const outcomes = await Promise.all(greedyCalls);
    expect(outcomes.slice(0, 4)).toEqual(['OK', 'CANCELLED', 'CANCELLED', 'CANCELLED']);
    // Greedy's fifth got other's block once other was done, unless the abort came first.
    expect(['OK', 'CANCELLED']).toContain(outcomes[4]);
    await expectPoolsEmpty(other);
  });

  it('cancel, then reuse of the same pool block: the next call reads its own bytes', async () => {
    // One 16 MiB block fits in the pool at a time: the second call of each pair gets the block the
    // cancelled one was receiving into, only once UCX is done with it.
    await using server = await startServer({ poolBytes: 24 * MiB, maxTensorBytes: 16 * MiB });
    const client = await connect(server);
    for (let i = 0; i < 20; i += 1) {
      const stop = new AbortController();
      const cancelled = client.unary(EchoDescriptor.methods.checksum, { x: patterned(16 * MiB, i) }, { signal: stop.signal }).catch((e: GdrpcError) => e);
      setTimeout(() => stop.abort(), i % 5);
      const x = patterned(16 * MiB, 100 + i);
      const next = await client.unary(EchoDescriptor.methods.checksum, { x });
      expect(next.sum).toBe(byteSum(x));
      await cancelled;
    }
    await expectPoolsEmpty(client);
  }, 120_000);

  it.skipIf(!gpu)('back-to-back calls into a CUDA pool wait for its blocks too (bytes checked on the host)', async () => {
    await using server = await startServer({ poolBytes: 24 * MiB, maxTensorBytes: 32 * MiB });
    const client = await connect(server);
    const failures = await backToBack(40, async (x) => {
      const result = await client.unary(EchoDescriptor.methods.echoCuda, { x });
      const y = result.y as Tensor;
      expect(result.device).toBe('cuda:0');
      const host = y.to('cpu');
      expect(byteSum(host)).toBe(byteSum(x));
      host.release();
      y.release();
    });
    expect(failures).toEqual([]);
    await expectPoolsEmpty(client);
  }, 180_000);
});
