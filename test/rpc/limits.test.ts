// Concurrency limits: per connection and over all connections, refused with RESOURCE_EXHAUSTED
// and recovered from as soon as calls finish.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code, GdrpcError, Tensor } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { inProcessEcho } from './fixtures/in-process.ts';

let server: ListeningPeer;
let a: Client;
let b: Client;

beforeAll(async () => {
  server = await startServer({ maxCallsPerConnection: 2, maxCalls: 3 });
  [a, b] = await Promise.all([Client.connect(server.address), Client.connect(server.address)]);
});
afterAll(async () => {
  await a?.close();
  await b?.close();
  await disposePeers();
});

const outcomes = async (calls: Array<Promise<unknown>>): Promise<string[]> =>
  (await Promise.allSettled(calls)).map((s) => (s.status === 'fulfilled' ? 'OK' : (s.reason as GdrpcError).code)).sort();

describe('concurrency limits', () => {
  it('refuses the call over the per-connection limit, at once, saying which option and that a retry may work', async () => {
    const calls = [0, 1, 2].map(() => a.unary(EchoDescriptor.methods.sleep, { ms: 300 }));
    expect(await outcomes(calls)).toEqual(['OK', 'OK', Code.RESOURCE_EXHAUSTED].sort());
    const refused = (await Promise.allSettled([0, 1, 2].map(() => a.unary(EchoDescriptor.methods.sleep, { ms: 300 }))))
      .find((s) => s.status === 'rejected') as PromiseRejectedResult;
    expect((refused.reason as GdrpcError).message).toMatch(/maxCallsPerConnection/);
    expect((refused.reason as GdrpcError).details).toMatchObject({ retryable: true, limit: 'maxCallsPerConnection' });
  });

  it('refuses the call over the per-address limit, over all the connections from that address', async () => {
    const perAddress = await startServer({ maxCallsPerConnection: 8, maxCalls: 64, maxCallsPerAddress: 3 });
    const [c, d] = await Promise.all([Client.connect(perAddress.address), Client.connect(perAddress.address)]);
    try {
      const calls = [c, c, d, d].map((client) => client.unary(EchoDescriptor.methods.sleep, { ms: 300 }));
      const settled = await Promise.allSettled(calls);
      expect(settled.map((s) => (s.status === 'fulfilled' ? 'OK' : (s.reason as GdrpcError).code)).sort()).toEqual(['OK', 'OK', 'OK', Code.RESOURCE_EXHAUSTED].sort());
      const refused = settled.find((s) => s.status === 'rejected') as PromiseRejectedResult;
      expect((refused.reason as GdrpcError).message).toMatch(/3 calls in flight from 127\.0\.0\.1 \(ServerOptions\.maxCallsPerAddress\)/);
      expect((refused.reason as GdrpcError).details).toMatchObject({ retryable: true, limit: 'maxCallsPerAddress' });
      // The slots come back with the calls.
      expect(await outcomes([0, 1, 2].map(() => d.unary(EchoDescriptor.methods.ping, { n: 1 })))).toEqual(['OK', 'OK', 'OK']);
    } finally {
      await c.close();
      await d.close();
    }
  });

  it('refuses a call whose decoded arguments would take those of the calls in flight past maxArgumentBytes, and takes it once they returned', async () => {
    const MiB = 1 << 20;
    const limited = await startServer({ maxArgumentBytes: 8 * MiB });
    const c = await Client.connect(limited.address);
    try {
      // Arguments of 3 MiB each, inline in their REQUESTs, held while their handlers sleep.
      const x = Tensor.zeros([3 * MiB], 'u8');
      const calls = [0, 1, 2, 3].map(() => c.unary(EchoDescriptor.methods.hold, { x, ms: 500 }, { mover: 'inline' }));
      const settled = await Promise.allSettled(calls);
      expect(settled.map((s) => (s.status === 'fulfilled' ? 'OK' : (s.reason as GdrpcError).code)).sort()).toEqual(['OK', 'OK', Code.RESOURCE_EXHAUSTED, Code.RESOURCE_EXHAUSTED].sort());
      const refused = settled.find((s) => s.status === 'rejected') as PromiseRejectedResult;
      expect((refused.reason as GdrpcError).message).toMatch(/decoded arguments.*ServerOptions\.maxArgumentBytes \(8388608\)/);
      expect((refused.reason as GdrpcError).details).toMatchObject({ retryable: true, limit: 'maxArgumentBytes' });
      expect(await outcomes([0, 1].map(() => c.unary(EchoDescriptor.methods.hold, { x, ms: 1 }, { mover: 'inline' })))).toEqual(['OK', 'OK']);
    } finally {
      await c.close();
    }
  });

  it('refuses the call over the global limit, whichever connection it comes on', async () => {
    const calls = [a, a, b, b].map((client) => client.unary(EchoDescriptor.methods.sleep, { ms: 300 }));
    expect(await outcomes(calls)).toEqual(['OK', 'OK', 'OK', Code.RESOURCE_EXHAUSTED].sort());
    // Capacity is back once they finished.
    expect(await outcomes([a.unary(EchoDescriptor.methods.ping, { n: 1 }), b.unary(EchoDescriptor.methods.ping, { n: 2 })])).toEqual(['OK', 'OK']);
  });
});

describe('frame limit on the client side', () => {
  it('fails a tensorless call whose request exceeds the server\'s frame limit, at once, and keeps the connection', async () => {
    const started = performance.now();
    const error = await a.unary(EchoDescriptor.methods.ping, { n: 1 }, { metadata: { k: 'x'.repeat(5 << 20) } }).then(
      () => undefined, (e: unknown) => e as GdrpcError);
    expect(error).toBeInstanceOf(GdrpcError);
    expect(error!.code).toBe(Code.RESOURCE_EXHAUSTED);
    expect(error!.message).toMatch(/frame limit/);
    expect(performance.now() - started).toBeLessThan(2000);
    expect(await a.unary(EchoDescriptor.methods.ping, { n: 7 })).toBeDefined();
  });
});

describe('frame limit on the server side', () => {
  it("fails a call whose RESPONSE exceeds the client's frame limit with that error, instead of leaving it to its deadline", async () => {
    // The server takes 8 MiB frames, the client 4 MiB: a 5 MiB string goes there but not back.
    const wide = await startServer({ maxFrameBytes: 8 << 20 });
    const client = await Client.connect(wide.address);
    try {
      const x = Tensor.fromArray(new Uint8Array([1, 2, 3]));
      const error = await client.unary(EchoDescriptor.methods.echo, { x, tag: 't'.repeat(5 << 20) }, { deadline: 60_000 }).then(
        () => undefined, (e: unknown) => e as GdrpcError);
      expect(error).toBeInstanceOf(GdrpcError);
      expect(error!.code).toBe(Code.RESOURCE_EXHAUSTED);
      expect(error!.message).toMatch(/frame limit/);
      expect((await client.unary(EchoDescriptor.methods.ping, { n: 9 })).n).toBe(9);
    } finally {
      await client.close();
    }
  });
});

/** A gate a handler waits at, whatever becomes of its call, and how many wait there now. */
function gate(): { pass: () => Promise<void>; open: () => void; readonly waiting: number } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => { open = resolve; });
  let waiting = 0;
  return {
    pass: async () => {
      waiting += 1;
      await opened;
      waiting -= 1;
    },
    open,
    get waiting() { return waiting; },
  };
}

describe('handlers that ignore their signal', () => {
  it('count against maxCalls until they return, not only until their calls ended', async () => {
    const held = gate();
    const echo = await inProcessEcho({
      // Ignores ctx.signal: runs until the gate opens, whatever became of its call.
      sleep: async () => {
        await held.pass();
        return { aborted: false };
      },
      ping: (args: { n: number }) => ({ n: args.n }),
    }, { server: { maxCalls: 2 } });
    try {
      const ended = [1, 2].map(() => echo.client.unary(EchoDescriptor.methods.sleep, { ms: 1 }, { deadline: 200 }).then(() => 'OK', (error: GdrpcError) => error.code));
      expect(await Promise.all(ended)).toEqual([Code.DEADLINE_EXCEEDED, Code.DEADLINE_EXCEEDED]);
      expect(held.waiting).toBe(2);
      // Until 2026-12-06 their slots came back with their calls' end, and a client cancelling
      // calls as fast as it made them ran any number of such handlers at once.
      const refused = await echo.client.unary(EchoDescriptor.methods.ping, { n: 1 }).then(() => undefined, (error: GdrpcError) => error);
      expect(refused).toMatchObject({ code: Code.RESOURCE_EXHAUSTED, details: { limit: 'maxCalls' } });
      held.open();
      await expect.poll(() => held.waiting, { timeout: 5000, interval: 10 }).toBe(0);
      await expect.poll(() => echo.client.unary(EchoDescriptor.methods.ping, { n: 2 }).then((r) => r.n, (error: GdrpcError) => error.code), { timeout: 5000, interval: 20 }).toBe(2);
    } finally {
      held.open();
      await echo.close();
    }
  });
});

describe('a server-streaming handler that ignores its signal', () => {
  it('counts against maxCalls until the item it was making when its call ended is made', async () => {
    const held = gate();
    const echo = await inProcessEcho({
      ping: (args: { n: number }) => ({ n: args.n }),
      count: (async function* () {
        await held.pass();  // ignores ctx.signal
        yield { i: 0 };
      }) as never,
    }, { server: { maxCalls: 1 } });
    try {
      const stream = echo.client.serverStream(EchoDescriptor.methods.count, { upTo: 1, delayMs: 0 }, { deadline: 200 });
      const ended = await (async () => { for await (const _ of stream) { /* none comes */ } })().then(() => 'OK', (error: GdrpcError) => error.code);
      expect(ended).toBe(Code.DEADLINE_EXCEEDED);
      expect(held.waiting).toBe(1);
      const refused = await echo.client.unary(EchoDescriptor.methods.ping, { n: 1 }).then(() => undefined, (error: GdrpcError) => error);
      expect(refused).toMatchObject({ code: Code.RESOURCE_EXHAUSTED, details: { limit: 'maxCalls' } });
      held.open();
      await expect.poll(() => echo.client.unary(EchoDescriptor.methods.ping, { n: 2 }).then((r) => r.n, (error: GdrpcError) => error.code), { timeout: 5000, interval: 20 }).toBe(2);
    } finally {
      held.open();
      await echo.close();
    }
  });
});
