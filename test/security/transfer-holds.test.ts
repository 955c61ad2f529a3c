// A tensor's memory stays out of its pool while a UCX transfer reads or writes it, whatever its
// owner does meanwhile (Tensor.hold, core/tensor/storage.ts). A helper session playing the
// attacker (2026-12-07) found both directions open: a puller that took a pulled tensor's bytes
// after the call that exposed it had ended read what the owner's pool handed out next (a 1 MiB
// "secret", 20 s later too), and a hostile owner that answered a pull and held its bytes past the
// pull's deadline wrote them into whatever the puller's pool handed out after the caller released
// its `into`.
import { afterAll, describe, expect, it } from 'vitest';
import { Packr } from 'msgpackr';
import { Client, Code, GdrpcError, Runtime, Server, Tensor, type RemoteTensor, type UnaryHandler } from '../../core/index.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { packMessage } from '../../core/wire/message.ts';
import { dataTag, EXACT_MASK } from '../../core/wire/tag.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { RawPeer } from '../rpc/fixtures/raw-peer.ts';
import { RawServer } from '../rpc/fixtures/raw-server.ts';

const packr = new Packr({ useRecords: false });
const BYTES = 1 << 20;
const runtimes: Runtime[] = [];
afterAll(async () => { for (const runtime of runtimes) await runtime.close(); });

function runtime(): Runtime {
  const made = Runtime.create();
  runtimes.push(made);
  return made;
}

/** How many of `bytes` hold each value, as [hex, count] pairs. */
function histogram(bytes: Uint8Array): Array<[string, number]> {
  const counts = new Map<number, number>();
  for (const b of bytes) counts.set(b, (counts.get(b) ?? 0) + 1);
  return [...counts].map(([k, v]) => [k.toString(16), v]);
}

describe('transfers hold their memory', () => {
  it.each(['pull', 'pullMany'])("a puller that takes the bytes of a %s after the exposing call ended and the owner released the tensor reads the tensor's bytes, not what the pool handed out next", async (method) => {
    const owner = runtime();
    const hostileRuntime = runtime();
    let stolen: { raw: RawPeer; x: number } | undefined;
    const refuse = (name: string): UnaryHandler => () => { throw new GdrpcError(Code.UNIMPLEMENTED, name); };
    const handlers: Record<string, UnaryHandler> = Object.fromEntries(Object.keys(EchoDescriptor.methods).map((name) => [name, refuse(name)]));
    // The hostile server pulls the handle by hand and does not take the bytes, then answers.
    handlers.pullSum = async (args: { h: RemoteTensor }) => {
      const w = args.h.wire;
      const raw = await RawPeer.connect(Number(w.o!.split(':').pop()));
      await raw.auth();
      expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
      raw.keepAlive(200);
      await raw.sendBody(FrameKind.Request, 1, { svc: 'gdrpc.Owner', m: method, a: method === 'pull' ? { x: w.x, s: w.s } : { xs: [w.x], ss: [w.s] } });
      const r = (await raw.receive())?.body.r as { t?: { x: number }; ts?: Array<{ x: number }> };
      stolen = { raw, x: (r.t ?? r.ts![0]!).x };
      return { sum: 0 };
    };
    const ownerServer = Server.create({ runtime: owner });
    await ownerServer.listen({ host: '127.0.0.1', port: 0 });
    const hostile = Server.create({ runtime: hostileRuntime }).register(EchoDescriptor, handlers);
    await hostile.listen({ host: '127.0.0.1', port: 0 });
    const client = await Client.connect(hostile.address!, { runtime: owner });
    try {
      const pool = owner.createPool({ device: 'cpu', bytes: 4 * BYTES });
      const exposed = pool.allocate([BYTES], 'u8');
      exposed.bytes().fill(0xaa);
      const address = exposed.address;
      await client.unary(EchoDescriptor.methods.pullSum, { h: exposed });
      // The exposing call is over: its owner may release the tensor (docs/runtime-api.md).
      exposed.release();
      const secret = pool.allocate([BYTES], 'u8');
      secret.bytes().fill(0x5e);
      // Before, the secret took the released block.
      expect(secret.address).not.toBe(address);
      const taken = new Uint8Array(BYTES);
      const { raw, x } = stolen!;
      await raw.worker.tagRecv(taken, dataTag(raw.key, x), EXACT_MASK);
      expect(histogram(taken)).toEqual([['aa', BYTES]]);
      await raw.close();
      secret.release();
    } finally {
      await client.close();
      await hostile.shutdown({ graceMs: 0 });
      await ownerServer.shutdown({ graceMs: 0 });
    }
  });

  it.each(['pull', 'pullBlocks'])("a hostile owner that sends a %s's bytes after the pull failed does not write into what the puller's pool handed out after the caller released its `into`", async (method) => {
    const ROWS = 512;
    const COLS = 1024;
    const owner = RawServer.listen();
    const server = RawServer.listen();
    const rt = runtime();
    const connecting = Client.connect(server.address, { runtime: rt });
    await server.admit();
    const client = await connecting;
    try {
      // A handle to the hostile owner, from a call the test's raw server answers.
      const call = client.unary(EchoDescriptor.methods.region, { rows: ROWS, cols: COLS });
      const request = (await server.receive())?.find((f) => f.kind === FrameKind.Request);
      const handleWire = { dt: 'u16', sh: [ROWS, COLS], n: BYTES, mt: 'host', m: 'h', o: owner.address, x: 7, s: new Uint8Array(16).fill(7) };
      await server.sendMessage(packMessage([{ kind: FrameKind.Response, call: request!.call, body: packr.pack({ v: 2, r: { h: handleWire } }) }]));
      const handle = (await call).h as RemoteTensor;
      const pool = rt.createPool({ device: 'cpu', bytes: 4 * BYTES });
      const connectingOwner = handle.connect();
      await owner.admit();
      const via = await connectingOwner;
      const into = pool.allocate([ROWS, COLS], 'u16');
      const address = into.address;
      const pulling = method === 'pull'
        ? handle.pull({ into, via, deadline: 300 })
        : handle.pullBlocks(Array.from({ length: ROWS }, (_, i) => i), { into, via, deadline: 300 });
      const pullRequest = (await owner.receive())?.find((f) => f.kind === FrameKind.Request)!;
      // The descriptor now, the bytes after the pull's deadline.
      await owner.sendMessage(packMessage([{ kind: FrameKind.Response, call: pullRequest.call, body: packr.pack({ v: 2, r: { t: { dt: 'u16', sh: [ROWS, COLS], n: BYTES, mt: 'host', m: 't', x: 100 } } }) }]));
      expect(await pulling.then(() => 'resolved', (e: GdrpcError) => e.code)).toBe(Code.DEADLINE_EXCEEDED);
      into.release();
      const victim = pool.allocate([ROWS, COLS], 'u16');
      victim.bytes().fill(0x11);
      // Before, the victim took the released block.
      expect(victim.address).not.toBe(address);
      await owner.payload(100, new Uint8Array(BYTES).fill(0x66)).catch(() => { /* the connection may be gone */ });
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(histogram(victim.bytes())).toEqual([['11', BYTES]]);
      victim.release();
      await via.close().catch(() => {});
    } finally {
      await client.close();
      await owner.close();
      await server.close();
    }
  });

  /** A server whose `region` returns a new pool tensor `@remote`, released by `release`. */
  async function regionServer(release: (h: Tensor, ctx: { afterSend(fn: () => void): void }) => void, options: { exposureHoldMs?: number } = {}) {
    const owner = runtime();
    const pool = owner.createPool({ device: 'cpu', bytes: 8 * BYTES });
    const refuse = (name: string): UnaryHandler => () => { throw new GdrpcError(Code.UNIMPLEMENTED, name); };
    const handlers: Record<string, UnaryHandler> = Object.fromEntries(Object.keys(EchoDescriptor.methods).map((name) => [name, refuse(name)]));
    handlers.region = ((args: { rows: number; cols: number }, ctx: { afterSend(fn: () => void): void }) => {
      const h = pool.allocate([args.rows, args.cols], 'u16');
      h.bytes().fill(0x33);
      release(h, ctx);
      return { h };
    }) as UnaryHandler;
    const server = Server.create({ runtime: owner, ...options }).register(EchoDescriptor, handlers);
    await server.listen({ host: '127.0.0.1', port: 0 });
    const client = await Client.connect(server.address!, { runtime: runtime() });
    return { owner, pool, client, server, close: async () => { await client.close(); await server.shutdown({ graceMs: 0 }); } };
  }

  it("a tensor returned `@remote` and released in afterSend is released once it was pulled, not when the answer left (its pull failed before)", async () => {
    const { owner, pool, client, close } = await regionServer((h, ctx) => ctx.afterSend(() => h.release()));
    try {
      const { h } = await client.unary(EchoDescriptor.methods.region, { rows: 512, cols: 1024 }) as { h: RemoteTensor };
      // The answer has left; the tensor is still the handle's.
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(pool.stats().used).toBeGreaterThan(0);
      const pulled = await h.pull({ deadline: 10_000 });
      expect(histogram(pulled.bytes())).toEqual([['33', BYTES]]);
      pulled.release();
      await expect.poll(() => pool.stats().used, { timeout: 10_000 }).toBe(0);
      expect(owner.owner.size).toBe(0);
    } finally {
      await close();
    }
  });

  it('handles to tensors returned `@remote` that nobody pulls (their callers gave up) end exposureHoldMs after their calls, and afterSend releases the tensors then', async () => {
    let made = 0;
    let released = 0;
    const { owner, pool, client, server, close } = await regionServer((h, ctx) => { made += 1; ctx.afterSend(() => { h.release(); released += 1; }); }, { exposureHoldMs: 300 });
    try {
      // Deadlines too short for the answers: the callers drop the handles they never see.
      for (let i = 0; i < 10; i += 1) await client.unary(EchoDescriptor.methods.region, { rows: 512, cols: 1024 }, { deadline: 1 }).catch(() => {});
      // Every call has run (or never will) before its tensors are counted.
      await expect.poll(() => server.activeCalls, { timeout: 10_000 }).toBe(0);
      // Before, the tensors, their exposures and afterSend were held until the client closed.
      await expect.poll(() => pool.stats().used, { timeout: 10_000 }).toBe(0);
      expect(owner.owner.size).toBe(0);
      // Every handler that ran (a call whose deadline passed before it came runs none).
      expect(made).toBeGreaterThan(0);
      expect(released).toBe(made);
    } finally {
      await close();
    }
  });

  it('a handle whose tensor its owner released fails a pull NOT_FOUND at once, not after transferTimeoutMs', async () => {
    const { owner, pool, client, close } = await regionServer((h) => { setTimeout(() => h.release(), 50); });
    try {
      const { h } = await client.unary(EchoDescriptor.methods.region, { rows: 512, cols: 1024 }) as { h: RemoteTensor };
      await expect.poll(() => pool.stats().used, { timeout: 10_000 }).toBe(0);
      // A deadline well under transferTimeoutMs (30 s): before, the pull ran into it.
      const outcome = await h.pull({ deadline: 10_000 }).then(() => 'resolved', (e: GdrpcError) => e.code);
      expect(outcome).toBe(Code.NOT_FOUND);
      expect(owner.owner.size).toBe(0);
    } finally {
      await close();
    }
  });

  it("a pool tensor released while held goes back to its pool only when the last hold ends", () => {
    const pool = runtime().createPool({ device: 'cpu', bytes: 2 * BYTES });
    const a = pool.allocate([BYTES], 'u8');
    const unholdFirst = a.hold();
    const unholdSecond = a.hold();
    a.release();
    expect(a.released).toBe(true);
    expect(() => a.bytes()).toThrow(/released/);
    expect(pool.stats().used).toBe(BYTES);
    unholdFirst();
    unholdFirst();  // once only
    expect(pool.stats().used).toBe(BYTES);
    unholdSecond();
    expect(pool.stats().used).toBe(0);
    expect(() => a.hold()).toThrow(/released/);
    const b = Tensor.zeros([4], 'u8');
    const unhold = b.hold();
    unhold();
    b.release();
    expect(b.released).toBe(true);
    pool.close();
  });
});
