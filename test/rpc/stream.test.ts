// Streaming both ways: order, tensors in items, and early ends from either side.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Packr } from 'msgpackr';
import { Client, Code, type CallContext, type Tensor } from '../../core/index.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { MAX_MESSAGE_FRAMES, packMessage } from '../../core/wire/message.ts';
import { inProcessEcho } from './fixtures/in-process.ts';
import { MAX_STREAM_BACKLOG } from '../../core/rpc/server/server-call.ts';
import { RawPeer } from './fixtures/raw-peer.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { codeOf, expectPoolsEmpty, serverStats } from './fixtures/stats.ts';
import { byteSum, patterned } from './fixtures/tensors.ts';

let server: ListeningPeer;
let client: Client;

beforeAll(async () => {
  server = await startServer({ poolBytes: 32 << 20 });
  client = await Client.connect(server.address);
});
afterAll(async () => {
  await client?.close();
  await disposePeers();
});

async function collect(iterable: AsyncIterable<Record<string, unknown>>): Promise<number[]> {
  const out: number[] = [];
  for await (const item of iterable) out.push(item.i as number);
  return out;
}

describe('server streaming', () => {
  it('delivers every item in order, then ends', async () => {
    expect(await collect(client.serverStream(EchoDescriptor.methods.count, { upTo: 50, delayMs: 0 }))).toEqual([...Array(50).keys()]);
    expect(await collect(client.serverStream(EchoDescriptor.methods.count, { upTo: 0, delayMs: 0 }))).toEqual([]);
  });

  it('a stream its caller aborts throws at once: the items received and not taken are not handed out, and their tensors are released', async () => {
    const pool = client.pool('cpu');
    const before = pool.stats().liveTensors;
    const controller = new AbortController();
    const iterator = client.serverStream(EchoDescriptor.methods.repeat, { x: patterned(64 << 10), times: 100_000 }, { signal: controller.signal })[Symbol.asyncIterator]();
    const first = await iterator.next();
    expect(first.done).toBe(false);
    // Items come ahead of the caller, up to the stream's window.
    await expect.poll(() => pool.stats().liveTensors - before, { timeout: 10_000 }).toBeGreaterThan(4);
    controller.abort();
    // Before, the iterable went on handing out the items it held (up to 63) first.
    expect(await iterator.next().then(() => 'an item', (error: { code?: string }) => error.code)).toBe(Code.CANCELLED);
    (first.value.y as Tensor).release();
    await expect.poll(() => pool.stats().liveTensors, { timeout: 5000 }).toBe(before);
  });

  it('a stream the server has ended keeps its items for the caller after an abort of its own (a review found them dropped, the stream ending early without an error)', async () => {
    const controller = new AbortController();
    const iterator = client.serverStream(EchoDescriptor.methods.count, { upTo: 20, delayMs: 0 }, { signal: controller.signal })[Symbol.asyncIterator]();
    const seen = [(await iterator.next()).value?.i];
    // The call has ended on the server (only the stats call itself is active there), and its
    // last frame came before the stats call's answer on the same connection.
    await expect.poll(async () => (await serverStats(client)).activeCalls, { timeout: 10_000 }).toBe(1);
    controller.abort();
    for (;;) {
      const next = await iterator.next();
      if (next.done === true) break;
      seen.push(next.value.i);
    }
    expect(seen).toEqual([...Array(20).keys()]);
  });

  it('breaking out of the loop cancels the handler on the server', async () => {
    const before = (await serverStats(client)).aborted.filter((a) => a === 'count').length;
    const seen: number[] = [];
    for await (const item of client.serverStream(EchoDescriptor.methods.count, { upTo: 100_000, delayMs: 5 })) {
      seen.push(item.i as number);
      if (seen.length === 3) break;
    }
    expect(seen).toEqual([0, 1, 2]);
    await expect.poll(async () => (await serverStats(client)).aborted.filter((a) => a === 'count').length, { timeout: 5000 }).toBe(before + 1);
  });

  it('a slow reader holds the server to the stream window', async () => {
    const before = (await serverStats(client)).produced;
    let taken = 0;
    for await (const _ of client.serverStream(EchoDescriptor.methods.count, { upTo: 100_000, delayMs: 0 })) {
      taken += 1;
      if (taken === 1) {
        await new Promise((resolve) => setTimeout(resolve, 400));
        // 64 items in flight at most while the reader sleeps (none taken back yet beyond the first).
        expect((await serverStats(client)).produced - before).toBeLessThanOrEqual(64);
      }
      if (taken === 200) break;
    }
    // Credit came back as items were taken: the stream went on past the first window.
    expect(taken).toBe(200);
  });

  it('a slow reader of items larger than a 64th of maxResultBytes slows the server instead of failing: the server waits for their bytes to be taken', async () => {
    // 24 items of 1.5 MiB to a client that holds 4 MiB of untaken items: the item window (64)
    // alone let 36 MiB come, and the call failed RESOURCE_EXHAUSTED at the third item.
    const small = await Client.connect(server.address, { maxResultBytes: 4 << 20 });
    try {
      const x = patterned(3 << 19, 5);
      let taken = 0;
      for await (const item of small.serverStream(EchoDescriptor.methods.repeat, { x, times: 24 })) {
        expect(byteSum(item.y as Tensor)).toBe(byteSum(x));
        (item.y as Tensor).release();
        taken += 1;
        if (taken % 4 === 1) await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(taken).toBe(24);
    } finally {
      await small.close();
    }
  });

  it('aborting the signal mid-stream ends the iteration with CANCELLED', async () => {
    const controller = new AbortController();
    const seen: number[] = [];
    const run = (async () => {
      for await (const item of client.serverStream(EchoDescriptor.methods.count, { upTo: 100_000, delayMs: 5 }, { signal: controller.signal })) {
        seen.push(item.i as number);
        if (seen.length === 2) controller.abort();
      }
    })();
    expect(await codeOf(run)).toBe(Code.CANCELLED);
    expect(seen.length).toBeGreaterThanOrEqual(2);
  });

  it('a deadline mid-stream ends the iteration with DEADLINE_EXCEEDED', async () => {
    const seen: number[] = [];
    const run = (async () => {
      for await (const item of client.serverStream(EchoDescriptor.methods.count, { upTo: 100_000, delayMs: 10 }, { deadline: 150 })) seen.push(item.i as number);
    })();
    expect(await codeOf(run)).toBe(Code.DEADLINE_EXCEEDED);
    expect(seen.length).toBeGreaterThan(0);
  });
});

describe('client streaming', () => {
  it('sends items with tensors of several sizes; the server sees all of them', async () => {
    const sizes = [0, 1, 100, 8192, 9000, 300_000, 1 << 20];
    const tensors = sizes.map((size, i) => patterned(size, i));
    const result = await client.clientStream(EchoDescriptor.methods.sum, tensors.map((x) => ({ x })));
    expect(result.items).toBe(sizes.length);
    expect(result.total).toBe(tensors.reduce((sum, t) => sum + byteSum(t), 0));
    await expectPoolsEmpty(client);
  });

  it('takes an async generator', async () => {
    async function* items(): AsyncGenerator<{ x: Tensor }> {
      for (let i = 0; i < 20; i += 1) yield { x: patterned(20_000, i) };
    }
    const result = await client.clientStream(EchoDescriptor.methods.sum, items());
    expect(result.items).toBe(20);
  });

  it('the caller cancelling mid-stream fails CANCELLED and leaves the server clean', async () => {
    const controller = new AbortController();
    async function* items(): AsyncGenerator<{ x: Tensor }> {
      for (let i = 0; ; i += 1) {
        if (i === 3) controller.abort();
        yield { x: patterned(50_000, i) };
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    }
    expect(await codeOf(client.clientStream(EchoDescriptor.methods.sum, items(), { signal: controller.signal }))).toBe(Code.CANCELLED);
    expect((await client.unary(EchoDescriptor.methods.ping, { n: 1 })).n).toBe(1);
    await expectPoolsEmpty(client);
  });

  it('a slow handler holds the caller to the stream window', async () => {
    let produced = 0;
    async function* endless(): AsyncGenerator<{ x: Tensor }> {
      for (;;) {
        produced += 1;
        yield { x: patterned(100, produced) };
      }
    }
    const result = await client.clientStream(EchoDescriptor.methods.slowFirst, endless(), { deadline: 20_000 });
    expect(result.items).toBe(1);
    // 64 in flight, plus the one the loop has taken from the generator while waiting for credit.
    expect(produced).toBeLessThanOrEqual(65);
    await expectPoolsEmpty(client);
  });

  // A client stream's own failures end the server's call too: until 2026-12-06 a source that
  // threw, or an item that failed validation, left it open (its handler waiting, its items' pool
  // blocks held) for the connection's life, and 256 such calls refused every later call of the
  // connection (a helper session's fault hunt).
  it.each([
    { what: 'a source that throws', code: Code.CANCELLED, items: async function* (): AsyncGenerator<Record<string, unknown>> {
      yield { x: patterned(10_000, 1) };
      throw new Error('source failed');
    } },
    { what: 'an item that fails validation', code: Code.INVALID_ARGUMENT, items: async function* (): AsyncGenerator<Record<string, unknown>> {
      yield { x: patterned(10_000, 1) };
      yield { x: 'not a tensor' };
    } },
  ])('$what fails the call ($code) and ends the server\'s call, its items released', async ({ code, items }) => {
    const error = await client.clientStream(EchoDescriptor.methods.sum, items()).then(() => undefined, (failure: unknown) => failure);
    expect(error).toMatchObject({ code });
    if (code === Code.CANCELLED) expect((error as Error).cause).toMatchObject({ message: 'source failed' });
    await expect.poll(async () => (await serverStats(client)).activeCalls, { timeout: 10_000 }).toBe(1);
    await expectPoolsEmpty(client);
  });

  // The source is asked for each item under the call's race: until 2026-12-06 a deadline, a
  // signal or the client's close waited for a stalled source to yield again.
  it.each([
    { what: 'its deadline', code: Code.DEADLINE_EXCEEDED, options: () => ({ deadline: 300 }) },
    { what: 'its signal', code: Code.CANCELLED, options: () => ({ signal: AbortSignal.timeout(300) }) },
  ])('a source that stalls for good: $what ends the call ($code), and the source is returned', async ({ code, options }) => {
    let returned = false;
    const stalled: AsyncIterator<Record<string, unknown>> & AsyncIterable<Record<string, unknown>> = {
      next: async () => (returned ? { done: true, value: undefined } : new Promise<never>(() => {})),
      return: async () => { returned = true; return { done: true, value: undefined }; },
      [Symbol.asyncIterator]() { return this; },
    };
    expect(await codeOf(client.clientStream(EchoDescriptor.methods.sum, stalled, options()))).toBe(code);
    await expect.poll(() => returned, { timeout: 5000 }).toBe(true);
    await expect.poll(async () => (await serverStats(client)).activeCalls, { timeout: 10_000 }).toBe(1);
  });

  it('takes what for-await takes: a sync iterable when the async iterator is undefined; an iterator result that is no object fails CANCELLED', async () => {
    const items = [{ x: patterned(100, 1) }, { x: patterned(100, 2) }];
    const syncOnly = { [Symbol.asyncIterator]: undefined, [Symbol.iterator]: () => items[Symbol.iterator]() };
    expect((await client.clientStream(EchoDescriptor.methods.sum, syncOnly as unknown as Iterable<Record<string, unknown>>)).items).toBe(2);
    let n = 0;
    const forgetful = { [Symbol.asyncIterator]: () => ({ next: async () => (n++ < 2 ? { done: false, value: { x: patterned(100, n) } } : undefined) }) };
    const error = await client.clientStream(EchoDescriptor.methods.sum, forgetful as unknown as AsyncIterable<Record<string, unknown>>).then(() => undefined, (failure: unknown) => failure);
    expect(error).toMatchObject({ code: Code.CANCELLED, message: expect.stringMatching(/Iterator result undefined is not an object/) });
    await expectPoolsEmpty(client);
  });

  it('a source that stalls for good: the client\'s close ends the call', async () => {
    const own = await Client.connect(server.address);
    const call = own.clientStream(EchoDescriptor.methods.sum, { [Symbol.asyncIterator]: () => ({ next: () => new Promise<never>(() => {}) }) });
    const failed = codeOf(call);
    await new Promise((resolve) => setTimeout(resolve, 100));
    await own.close();
    expect(await failed).toBe(Code.CANCELLED);
  });

  it('the server answering early stops the caller from sending', async () => {
    let produced = 0;
    async function* endless(): AsyncGenerator<{ x: Tensor }> {
      for (;;) {
        produced += 1;
        yield { x: patterned(10_000, produced) };
        await new Promise((resolve) => setTimeout(resolve, 2));
      }
    }
    const result = await client.clientStream(EchoDescriptor.methods.first, endless(), { deadline: 20_000 });
    expect(result.items).toBe(1);
    expect(result.total).toBe(byteSum(patterned(10_000, 1)));
    expect(produced).toBeLessThan(1000);
    await expectPoolsEmpty(client);
  });
});

// How many items a client stream may send ahead of the server's handler: its window (`win` plus
// the CREDIT granted since), and MAX_STREAM_BACKLOG not yet taken whatever the window. A peer that
// ignored the window had every item queued (and each stalled the event loop a little longer: a
// message of 20,000 items held it 1.0 s, 59,193 of them 4.0-4.2 s, scratch).
describe('client stream limits', () => {
  const packr = new Packr({ useRecords: false });
  const item = (seq: number) => ({ kind: FrameKind.StreamItem, call: 5, body: packr.pack({ v: 2, seq, a: { x: { dt: 'u8', sh: [1], n: 1, mt: 'host', m: 'i', b: new Uint8Array([seq & 0xff]) } } }) });

  /** A raw peer's client stream of `count` items and its end, in one message after its REQUEST;
   *  the call's RESPONSE or ERROR. */
  async function overrun(request: Record<string, unknown>, count: number): Promise<Record<string, unknown> | undefined> {
    const raw = await RawPeer.connect(server.port);
    try {
      await raw.auth();
      expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
      await raw.sendBody(FrameKind.Request, 5, { svc: EchoDescriptor.name, m: 'sum', ...request });
      const items = Array.from({ length: count }, (_, seq) => item(seq));
      const end = { kind: FrameKind.StreamEnd, call: 5, body: packr.pack({ v: 2, seq: count }) };
      await raw.sendMessage(packMessage([...items, end]));
      for (let frame = await raw.receive(10_000); frame !== undefined; frame = await raw.receive(10_000)) {
        if (frame.call === 5 && (frame.kind === FrameKind.Error || frame.kind === FrameKind.Response)) return { kind: frame.kind, ...frame.body };
      }
      return undefined;
    } finally {
      await raw.close();
    }
  }

  it('an item after STREAM_END fails the call INVALID_ARGUMENT, its bytes refused', async () => {
    // Until 2026-12-06 such items were received into the pool and held there, out of the
    // handler's reach, until it returned (a helper session's 128 items of 1 MiB took a server's
    // whole pool while its handler worked on what it had read).
    const raw = await RawPeer.connect(server.port);
    try {
      await raw.auth();
      expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
      await raw.sendBody(FrameKind.Request, 5, { svc: EchoDescriptor.name, m: 'sum' });
      await raw.sendMessage(packMessage([item(0), { kind: FrameKind.StreamEnd, call: 5, body: packr.pack({ v: 2, seq: 1 }) }, item(1)]));
      let answer: { kind: number; body: Record<string, unknown> } | undefined;
      for (let frame = await raw.receive(10_000); frame !== undefined && answer === undefined; frame = answer === undefined ? await raw.receive(10_000) : undefined) {
        if (frame.call === 5 && (frame.kind === FrameKind.Error || frame.kind === FrameKind.Response)) answer = frame;
      }
      expect(answer?.kind).toBe(FrameKind.Error);
      expect(answer?.body).toMatchObject({ code: Code.INVALID_ARGUMENT });
      expect(String(answer?.body.msg)).toMatch(/the client sent stream item 1 after STREAM_END/);
    } finally {
      await raw.close();
    }
    await expectPoolsEmpty(client);
  });

  it('an honest stream of 2,000 items goes through on credit', async () => {
    const items = Array.from({ length: 2000 }, (_, i) => ({ x: patterned(1, i) }));
    const result = await client.clientStream(EchoDescriptor.methods.sum, items);
    expect(result.items).toBe(2000);
    expect(result.total).toBe(items.reduce((sum, { x }) => sum + byteSum(x), 0));
  });

  it('items past the window fail the call RESOURCE_EXHAUSTED', async () => {
    const answer = await overrun({ win: 2 }, 3);
    expect(answer).toMatchObject({ kind: FrameKind.Error, code: Code.RESOURCE_EXHAUSTED });
    expect(String(answer?.msg)).toMatch(/window allowed 2/);
    await expectPoolsEmpty(client);
  });

  it(`without a window, ${MAX_STREAM_BACKLOG} items ahead of the handler fail the call RESOURCE_EXHAUSTED`, async () => {
    // A handler that takes no item until its call ends: the items queue, in messages of
    // MAX_MESSAGE_FRAMES frames (a message may carry no more), whatever the timing.
    const echo = await inProcessEcho({
      sum: (async (_items: AsyncIterable<unknown>, ctx: CallContext) => {
        await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
        return { total: 0, items: 0 };
      }) as never,
    });
    try {
      const raw = await RawPeer.connect(echo.server.address!.port);
      try {
        await raw.auth();
        expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
        await raw.sendBody(FrameKind.Request, 5, { svc: EchoDescriptor.name, m: 'sum' });
        const count = MAX_STREAM_BACKLOG + 10;
        // Each message weighs more than the server's opening window (1 KiB a frame): a loan each.
        for (let seq = 0; seq < count; seq += MAX_MESSAGE_FRAMES) {
          await raw.sendBorrowing(packMessage(Array.from({ length: Math.min(MAX_MESSAGE_FRAMES, count - seq) }, (_, k) => item(seq + k))));
        }
        let answer: Record<string, unknown> | undefined;
        while (answer === undefined) {
          const frame = await raw.receive(10_000);
          if (frame === undefined) break;
          if (frame.call === 5) answer = { kind: frame.kind, ...frame.body };
        }
        expect(answer).toMatchObject({ kind: FrameKind.Error, code: Code.RESOURCE_EXHAUSTED });
        expect(String(answer?.msg)).toMatch(/more than the handler has taken/);
      } finally {
        await raw.close();
      }
    } finally {
      await echo.close();
    }
    // Within it, all are taken.
    expect(await overrun({}, 100)).toMatchObject({ kind: FrameKind.Response });
  });
});

// A server stream gives its event loop a turn every STREAM_YIELD_ITEMS items: items that need no
// I/O settle in microtasks, and a reader that opened no window (or granted a huge CREDIT) and kept
// reading held the server's event loop for as long as it read (5.5 s for a 5 s reader, scratch).
describe('a server stream without a window', () => {
  it('leaves the server serving other clients while it runs', async () => {
    const raw = await RawPeer.connect(server.port);
    try {
      await raw.auth();
      expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
      await raw.sendBody(FrameKind.Request, 7, { svc: EchoDescriptor.name, m: 'count', a: { upTo: 1e9, delayMs: 0 } });
      // Items flow (the stream runs) ...
      const first = await raw.receive(10_000);
      expect(first).toMatchObject({ kind: FrameKind.StreamItem, call: 7 });
      // ... and another client is answered meanwhile.
      const other = await Client.connect(server.address);
      try {
        expect((await other.unary(EchoDescriptor.methods.ping, { n: 11 })).n).toBe(11);
      } finally {
        await other.close();
      }
      await raw.sendBody(FrameKind.Cancel, 7, {});
    } finally {
      await raw.close();
    }
  }, 60_000);
});
