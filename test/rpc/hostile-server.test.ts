// A server that sends what no gdrpc server does, from a raw server (fixtures/raw-server.ts): the
// client fails what it must, tells the application through 'error', and never hangs on it.
import { afterEach, describe, expect, it } from 'vitest';
import { Packr } from 'msgpackr';
import { Client, Code, Runtime, Tensor, type ClientOptions, type GdrpcError } from '../../core/index.ts';
import { MAX_MALFORMED_FRAMES } from '../../core/rpc/connection/inbound.ts';
import { messageWeight } from '../../core/rpc/connection/window-frames.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { MAX_MESSAGE_FRAMES, packMessage } from '../../core/wire/message.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { clientPort, RawServer } from './fixtures/raw-server.ts';
import { GoAwayServer } from './fixtures/goaway-server.ts';
import { patterned } from './fixtures/tensors.ts';
import { MAX_DRAINING_CONNECTIONS } from '../../core/rpc/client/client.ts';

const packr = new Packr({ useRecords: false });
const notMsgpack = (call: number) => ({ kind: FrameKind.Response, call, body: new Uint8Array([0xc1]) });

const opened: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  for (const thing of opened.splice(0).reverse()) await thing.close();
});

/** A client admitted by a raw server, with its 'error' events collected, and one call in flight. */
async function connected(): Promise<{ raw: RawServer; client: Client; errors: GdrpcError[]; call: Promise<Record<string, unknown>>; callId: number }> {
  const raw = RawServer.listen();
  opened.push(raw);
  const connecting = Client.connect(raw.address, { poolBytes: 0 });
  // A failed admission is the error to see, not the connect it leaves rejected.
  connecting.catch(() => {});
  await raw.admit();
  const client = await connecting;
  opened.push(client);
  const errors: GdrpcError[] = [];
  client.on('error', (error) => errors.push(error));
  const call = client.unary(EchoDescriptor.methods.ping, { n: 7 });
  call.catch(() => {});
  const request = (await raw.receive())?.find((f) => f.kind === FrameKind.Request);
  if (request === undefined) throw new Error('no REQUEST reached the raw server');
  return { raw, client, errors, call, callId: request.call };
}

/** A client (default runtime, a pool for its results) admitted by a raw server; both closed after the test. */
async function admittedClient(options: ClientOptions = {}): Promise<{ raw: RawServer; client: Client }> {
  const raw = RawServer.listen();
  opened.push(raw);
  const connecting = Client.connect(raw.address, options);
  await raw.admit();
  const client = await connecting;
  opened.push(client);
  return { raw, client };
}

/** A server stream of Echo.repeat from `client`, its first item asked for, and the call id of the
 *  REQUEST `raw` read. */
async function repeatStream(raw: RawServer, client: Client, times: number): Promise<{ stream: AsyncIterator<Record<string, unknown>>; first: Promise<IteratorResult<Record<string, unknown>>>; call: number }> {
  const stream = client.serverStream(EchoDescriptor.methods.repeat, { x: Tensor.fromArray(new Uint8Array(4)), times })[Symbol.asyncIterator]();
  const first = stream.next();
  const request = (await raw.receive())?.find((f) => f.kind === FrameKind.Request);
  expect(request).toBeDefined();
  return { stream, first, call: request!.call };
}

/** Item `seq` of Echo.repeat's stream on `call`: `i` = seq and a tag tensor `y` of `bytes`, transfer seq + 1. */
function repeatItem(call: number, seq: number, bytes: number): { kind: number; call: number; body: Uint8Array } {
  return { kind: FrameKind.StreamItem, call, body: packr.pack({ v: 2, seq, a: { y: { dt: 'u8', sh: [bytes], n: bytes, mt: 'host', m: 't', x: seq + 1 }, i: seq } }) };
}

describe('a hostile server', () => {
  it(`${MAX_MALFORMED_FRAMES} malformed frames in one message: an 'error' each, and the call in flight is still answered`, async () => {
    const { raw, errors, call, callId } = await connected();
    await raw.sendMessage(packMessage(Array.from({ length: MAX_MALFORMED_FRAMES }, (_, i) => notMsgpack(1000 + i))));
    await raw.sendMessage(packMessage([{ kind: FrameKind.Response, call: callId, body: packr.pack({ v: 2, r: { n: 7 } }) }]));
    expect((await call).n).toBe(7);
    expect(errors.length).toBe(MAX_MALFORMED_FRAMES);
  });

  it('more malformed frames than that in one message: the client drops the connection, the call fails INTERNAL at once, and the rest raise no event', async () => {
    const { raw, client, errors, call } = await connected();
    const disconnected = new Promise<GdrpcError>((resolve) => client.once('disconnect', resolve));
    await raw.sendMessage(packMessage(Array.from({ length: 200 }, (_, i) => notMsgpack(1000 + i))));
    const failure = await call.then(() => undefined, (error: GdrpcError) => error);
    expect(failure?.code).toBe(Code.INTERNAL);
    expect(failure?.message).toMatch(/more than 16 malformed frames in one message/);
    expect((await disconnected).code).toBe(Code.INTERNAL);
    expect(errors.length).toBe(MAX_MALFORMED_FRAMES + 1);
  });

  it(`a message of more than ${MAX_MESSAGE_FRAMES} frames: the client drops the connection without reading any of them, and the call fails at once`, async () => {
    const { raw, client, call, callId } = await connected();
    const disconnected = new Promise<GdrpcError>((resolve) => client.once('disconnect', resolve));
    const keepalive = { kind: FrameKind.Keepalive, call: 0, body: packr.pack({ v: 2 }) };
    const response = { kind: FrameKind.Response, call: callId, body: packr.pack({ v: 2, r: { n: 7 } }) };
    const message = packMessage([...Array.from({ length: MAX_MESSAGE_FRAMES }, () => keepalive), response]);
    // It weighs more than the client's opening window (1 KiB a frame): a loan first, as a gdrpc
    // server would ask for one.
    await raw.borrow(messageWeight(message, message.length));
    await raw.sendMessage(message);
    const failure = await call.then(() => undefined, (error: GdrpcError) => error);
    expect(failure?.message).toMatch(`more than ${MAX_MESSAGE_FRAMES} frames in one message`);
    expect((await disconnected).message).toMatch(`more than ${MAX_MESSAGE_FRAMES} frames in one message`);
  });

  // A client holds a server stream to its window (64, and the credit it gave back since): a server
  // that ignored it had every item queued at the client, 50,000 a message, until the client's heap
  // ran out (scratch, a helper session playing that server).
  it('stream items past the window fail the call RESOURCE_EXHAUSTED after those within it', async () => {
    const { raw, client } = await admittedClient();
    const seen: number[] = [];
    const reading = (async () => {
      for await (const item of client.serverStream(EchoDescriptor.methods.count, { upTo: 1000, delayMs: 0 })) seen.push(item.i as number);
    })();
    const request = (await raw.receive())?.find((f) => f.kind === FrameKind.Request);
    expect(request).toBeDefined();
    await raw.sendMessage(packMessage(Array.from({ length: 100 }, (_, seq) => ({ kind: FrameKind.StreamItem, call: request!.call, body: packr.pack({ v: 2, seq, a: { i: seq } }) }))));
    const failure = await reading.then(() => undefined, (error: GdrpcError) => error);
    expect(failure).toMatchObject({ code: Code.RESOURCE_EXHAUSTED, details: { limit: 'streamWindow' } });
    expect(seen.length).toBeLessThanOrEqual(64);
  });

  it('stream items whose tensors, with those of the items not yet taken, pass maxResultBytes fail the call RESOURCE_EXHAUSTED before they are allocated; the items before them are the caller\'s', async () => {
    const MiB = 1 << 20;
    const { raw, client } = await admittedClient({ maxResultBytes: 4 * MiB });
    const { stream, first, call } = await repeatStream(raw, client, 8);
    // Eight items of 1 MiB in one message, the caller taking none yet: four fit under 4 MiB. Until
    // 2026-12-06 each item was held to the limit alone, and 64 of them (the stream window) were
    // received at once: 64 x maxResultBytes for one call.
    await raw.sendMessage(packMessage(Array.from({ length: 8 }, (_, seq) => repeatItem(call, seq, MiB))));
    for (let seq = 0; seq < 8; seq += 1) await raw.payload(seq + 1, new Uint8Array(MiB).fill(seq));
    const taken: number[] = [];
    let failure: GdrpcError | undefined;
    try {
      for (let next = await first; next.done !== true; next = await stream.next()) {
        const { y, i } = next.value as { y: Tensor; i: number };
        expect(y.toArray()[0]).toBe(i);
        taken.push(i);
        y.release();
      }
    } catch (error) {
      failure = error as GdrpcError;
    }
    expect(taken).toEqual([0, 1, 2, 3]);
    expect(failure).toMatchObject({ code: Code.RESOURCE_EXHAUSTED, details: { limit: 'maxResultBytes', requested: 5 * MiB, capacity: 4 * MiB } });
    expect(failure?.message).toMatch(/items received and not yet taken hold 4194304 bytes \(4 MiB\)/);
    await expect.poll(() => client.pool().stats().liveTensors, { timeout: 5000, interval: 20 }).toBe(0);
  });

  it('a stream whose caller takes its items as they come is not held to maxResultBytes in all', async () => {
    const MiB = 1 << 20;
    const { raw, client } = await admittedClient({ maxResultBytes: 2 * MiB });
    const { stream, first, call } = await repeatStream(raw, client, 6);
    const taken: number[] = [];
    let next = first;
    // Six items of 1 MiB, one at a time, each taken before the next comes: 6 MiB in all.
    for (let seq = 0; seq < 6; seq += 1) {
      await raw.sendMessage(packMessage([repeatItem(call, seq, MiB)]));
      await raw.payload(seq + 1, new Uint8Array(MiB).fill(seq));
      const result = await next;
      expect(result.done).toBe(false);
      const { y, i } = result.value as { y: Tensor; i: number };
      expect(y.toArray()[0]).toBe(seq);
      taken.push(i);
      y.release();
      next = stream.next();
    }
    await raw.sendMessage(packMessage([{ kind: FrameKind.StreamEnd, call, body: packr.pack({ v: 2, seq: 6 }) }]));
    expect((await next).done).toBe(true);
    expect(taken).toEqual([0, 1, 2, 3, 4, 5]);
  });

  it('a caller that stops reading early gets its untaken items\' tensors released', async () => {
    const { raw, client } = await admittedClient();
    const stream = client.serverStream(EchoDescriptor.methods.repeat, { x: Tensor.fromArray(new Uint8Array(4)), times: 8 })[Symbol.asyncIterator]();
    const first = stream.next();
    const request = (await raw.receive())?.find((f) => f.kind === FrameKind.Request);
    expect(request).toBeDefined();
    const bytes = 64 * 1024;
    await raw.sendMessage(packMessage(Array.from({ length: 8 }, (_, seq) => ({
      kind: FrameKind.StreamItem, call: request!.call, body: packr.pack({ v: 2, seq, a: { y: { dt: 'u8', sh: [bytes], n: bytes, mt: 'host', m: 't', x: 100 + seq }, i: seq } }),
    }))));
    for (let seq = 0; seq < 8; seq += 1) await raw.payload(100 + seq, new Uint8Array(bytes).fill(seq));
    ((await first).value!.y as Tensor).release();
    // The other seven arrive (or are on their way) while the caller leaves.
    await new Promise((resolve) => setTimeout(resolve, 200));
    await stream.return!(undefined);
    await expect.poll(() => client.pool().stats().liveTensors, { timeout: 10_000 }).toBe(0);
  });

  // A runtime closed its pools before its worker: a result's receive that the connection's close
  // had cancelled still held its pool block until UCX completed it, so the pool stayed mapped and
  // the context refused to close ("1 mapped region(s)"): close() rejected, the memory stayed.
  it('a runtime closes while a result\'s bytes are still awaited: close resolves, nothing stays mapped', async () => {
    const raw = RawServer.listen();
    opened.push(raw);
    const runtime = Runtime.create();
    const connecting = Client.connect(raw.address, { runtime });
    await raw.admit();
    const client = await connecting;
    const call = client.unary(EchoDescriptor.methods.echo, { x: Tensor.fromArray(new Uint8Array(4)), tag: 'a' });
    const request = (await raw.receive())?.find((f) => f.kind === FrameKind.Request);
    expect(request).toBeDefined();
    // A result whose bytes never come.
    await raw.sendMessage(packMessage([{ kind: FrameKind.Response, call: request!.call, body: packr.pack({ v: 2, r: { y: { dt: 'u8', sh: [1 << 20], n: 1 << 20, mt: 'host', m: 't', x: 1 }, tag: 'a' } }) }]));
    await new Promise((resolve) => setTimeout(resolve, 200));
    // The runtime closes its client, then the rest, at once (as the default one does when its
    // last client closes).
    call.catch(() => {});
    await expect(runtime.close()).resolves.toBeUndefined();
    await expect(call).rejects.toMatchObject({ code: Code.CANCELLED });
  });

  // A result object's tensors are checked in all against ClientOptions.maxResultBytes (default
  // 4 GiB) before anything is allocated: a server that answered with 16 results of 1 GiB each had
  // its client allocate 16 GiB (scratch; results are received outside the pool when it is full).
  for (const [limit, count, bytes] of [[undefined, 5, 2 ** 30], [1 << 20, 3, 1 << 19]] as const) {
    it(`${count} results of ${bytes} bytes past maxResultBytes ${limit ?? '(default)'} fail the call RESOURCE_EXHAUSTED, nothing allocated`, async () => {
      const { raw, client } = await admittedClient(limit === undefined ? {} : { maxResultBytes: limit });
      const call = client.unary(EchoDescriptor.methods.echoList, { xs: [Tensor.fromArray(new Uint8Array(4))] });
      const request = (await raw.receive())?.find((f) => f.kind === FrameKind.Request);
      expect(request).toBeDefined();
      const ys = Array.from({ length: count }, (_, i) => ({ dt: 'u8', sh: [bytes], n: bytes, mt: 'host', m: 't', x: i + 1 }));
      await raw.sendMessage(packMessage([{ kind: FrameKind.Response, call: request!.call, body: packr.pack({ v: 2, r: { ys } }) }]));
      // A few bytes under each id: the client's refusals (a 1-byte receive each) take them at once.
      for (const y of ys) await raw.payload(y.x, new Uint8Array(16));
      const failure = await call.then(() => undefined, (error: GdrpcError) => error);
      expect(failure).toMatchObject({ code: Code.RESOURCE_EXHAUSTED, details: { limit: 'maxResultBytes', requested: count * bytes, capacity: limit ?? 4 * 2 ** 30 } });
      expect(failure?.message).toMatch(/ys\[2\]|ys\[4\]/);
      expect(failure?.message).toMatch(/ClientOptions\.maxResultBytes/);
      expect(client.pool().stats()).toMatchObject({ used: 0, liveTensors: 0 });
    });
  }

  // A result tensor is checked against ClientOptions.maxTensorBytes (default 1 GiB) before anything
  // is allocated: a server that announced an 8 GiB result had its client allocate and register it.
  for (const [limit, bytes] of [[undefined, 2 ** 31], [1 << 20, 2 << 20]] as const) {
    it(`a result of ${bytes} bytes past maxTensorBytes ${limit ?? '(default)'} fails the call RESOURCE_EXHAUSTED, nothing allocated`, async () => {
      const { raw, client } = await admittedClient(limit === undefined ? {} : { maxTensorBytes: limit });
      const call = client.unary(EchoDescriptor.methods.echo, { x: Tensor.fromArray(new Uint8Array(4)), tag: 'a' });
      const request = (await raw.receive())?.find((f) => f.kind === FrameKind.Request);
      expect(request).toBeDefined();
      await raw.sendMessage(packMessage([{ kind: FrameKind.Response, call: request!.call, body: packr.pack({ v: 2, r: { y: { dt: 'u8', sh: [bytes], n: bytes, mt: 'host', m: 't', x: 1 }, tag: 'a' } }) }]));
      // A few bytes under its id: the client's refusal (a 1-byte receive) takes them at once.
      await raw.payload(1, new Uint8Array(16));
      const failure = await call.then(() => undefined, (error: GdrpcError) => error);
      expect(failure).toMatchObject({ code: Code.RESOURCE_EXHAUSTED, details: { limit: 'maxTensorBytes', requested: bytes } });
      expect(failure?.message).toMatch(/ClientOptions\.maxTensorBytes/);
      expect(client.pool().stats()).toMatchObject({ used: 0, liveTensors: 0 });
    });
  }

  it(`GOAWAY answering every call: the client keeps ${MAX_DRAINING_CONNECTIONS} connections draining at most (the oldest closed UNAVAILABLE, its calls with it), and its close ends the rest and every call`, async () => {
    const server = GoAwayServer.listen();
    opened.push(server);
    const runtime = Runtime.create();
    const client = await Client.connect(server.address, { runtime });
    const outcomes: Array<Promise<string>> = [];
    try {
      // One after another: each call's REQUEST is answered with GOAWAY, and the next call connects
      // again (or, while the client has not read that GOAWAY yet, joins the draining connection).
      // Until 2026-12-06 every one of those connections stayed open (33 took the runtime's whole
      // maxWindowBytes) and survived the client's close, their calls never settled.
      // Until the client has made MAX_DRAINING_CONNECTIONS + 3 connections (40 calls at most: on a
      // busy machine a call may join a connection before the client read its GOAWAY).
      for (let i = 0; i < 40 && server.admitted < MAX_DRAINING_CONNECTIONS + 3; i += 1) {
        outcomes.push(client.unary(EchoDescriptor.methods.ping, { n: i }).then(() => 'answered', (error: GdrpcError) => error.code));
        await expect.poll(() => server.goAways, { timeout: 10_000, interval: 10 }).toBeGreaterThanOrEqual(server.admitted);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(server.admitted).toBeGreaterThanOrEqual(MAX_DRAINING_CONNECTIONS + 3);
      await expect.poll(() => server.open, { timeout: 10_000, interval: 20 }).toBeLessThanOrEqual(MAX_DRAINING_CONNECTIONS + 1);
      expect(runtime.lentWindow.opened).toBeLessThanOrEqual((MAX_DRAINING_CONNECTIONS + 1) * (8 << 20));
      // The calls of the connections closed for it failed UNAVAILABLE, before the client's close.
      const early = await Promise.all(outcomes.map((outcome) => Promise.race([outcome, new Promise((resolve) => setTimeout(resolve, 100, 'pending'))])));
      expect(early.filter((outcome) => outcome === Code.UNAVAILABLE).length).toBeGreaterThanOrEqual(server.admitted - MAX_DRAINING_CONNECTIONS - 1);
      await client.close();
      const settled = await Promise.all(outcomes);
      expect(settled.every((outcome) => outcome === Code.UNAVAILABLE || outcome === Code.CANCELLED)).toBe(true);
      expect(settled.filter((outcome) => outcome === Code.CANCELLED).length).toBeGreaterThan(0);
      await expect.poll(() => server.open, { timeout: 10_000, interval: 20 }).toBe(0);
      expect(runtime.lentWindow.opened).toBe(0);
    } finally {
      await client.close();
      await runtime.close();
    }
  });

  it('a connection draining after GOAWAY closes once its last call ran into its deadline', async () => {
    const raw = RawServer.listen();
    opened.push(raw);
    const connecting = Client.connect(raw.address, { poolBytes: 0 });
    await raw.admit();
    const client = await connecting;
    opened.push(client);
    const call = client.unary(EchoDescriptor.methods.ping, { n: 1 }, { deadline: 3000 }).catch((error: GdrpcError) => error.code);
    expect((await raw.receive())?.some((f) => f.kind === FrameKind.Request)).toBe(true);
    await raw.sendMessage(packMessage([{ kind: FrameKind.GoAway, call: 0, body: packr.pack({ v: 2 }) }]));
    // Draining, with its call in flight: open.
    expect(await raw.closedWithin(500)).toBe('open');
    expect(await call).toBe(Code.DEADLINE_EXCEEDED);
    // The server hears why (CANCEL goes out before the close) ...
    let cancel: { kind: number; call: number } | undefined;
    for (let m = await raw.receiveMessage(5000); m !== undefined && cancel === undefined; m = cancel === undefined ? await raw.receiveMessage(5000) : undefined) {
      cancel = m.frames.find((f) => f.kind === FrameKind.Cancel && f.body.code === Code.DEADLINE_EXCEEDED);
    }
    expect(cancel).toBeDefined();
    // ... and the connection closes: until 2026-12-06 only a call answered closed it.
    expect(await raw.closedWithin(10_000)).toBe('closed');
  });

  it('a second READY after the first is not read as one: the window stays the first READY\'s', async () => {
    const raw = RawServer.listen();
    opened.push(raw);
    const connecting = Client.connect(raw.address, { poolBytes: 0, livenessMs: 60_000 });
    await raw.admit({ win: 65_536, wmax: 256 << 20 }, { win: 1 << 20 }, [{ kind: FrameKind.Ready, call: 0, body: packr.pack({ v: 2, win: 256 << 20 }) }]);
    const client = await connecting;
    opened.push(client);
    // 12 calls of 256 KiB inline arguments (a message each): 1 MiB lets three go without credit;
    // a second READY of 256 MiB let all 12 go (a helper session's server).
    for (let i = 0; i < 12; i += 1) {
      client.unary(EchoDescriptor.methods.echo, { x: patterned(256 << 10, i), tag: `c${i}` }, { mover: 'inline' }).catch(() => {});
      await new Promise((resolve) => setImmediate(resolve));
    }
    let bytes = raw.authBytes;
    let requests = 0;
    for (let m = await raw.receiveMessage(1000); m !== undefined; m = await raw.receiveMessage(1000)) {
      bytes += m.length;
      requests += m.frames.filter((f) => f.kind === FrameKind.Request).length;
    }
    expect(requests).toBeGreaterThan(0);
    expect(requests).toBeLessThan(12);
    expect(bytes).toBeLessThanOrEqual(1 << 20);
  });

  // A server (an owner named in @remote handles) that stops in its handshake held every later
  // connection of the process: HELLOs were told apart by turns, and a turn lasted until READY
  // (8 such handles: an honest connect took 39.5 s), then until HELLO. Now HELLO names the
  // client's port and goes to the connection on it.
  const stalls = [
    ['sends HELLO and never READY', (server: RawServer) => server.hello()],
    ['never sends HELLO', async (server: RawServer) => { await server.accepted(); }],
  ] as const;
  it.each(stalls)('a server that %s does not hold up the process\'s next connection', async (_, stall) => {
    const stalling = RawServer.listen();
    opened.push(stalling);
    const honest = RawServer.listen();
    opened.push(honest);
    const stalled = Client.connect(stalling.address, { connectTimeoutMs: 4000 }).then(() => 'stalled connected', () => 'stalled failed');
    await stall(stalling);
    const admitting = honest.admit();
    const connected = Client.connect(honest.address, { connectTimeoutMs: 8000 }).then((client) => { opened.push(client); return 'honest connected'; }, () => 'honest failed');
    expect(await Promise.race([connected, stalled])).toBe('honest connected');
    await admitting;
    expect(await stalled).toBe('stalled failed');
  });

  it('HELLOs naming no waiting connection\'s port (another port, or none) reach no connection: that server\'s connection gives up, an honest one is admitted meanwhile', async () => {
    const honest = RawServer.listen();
    opened.push(honest);
    const hostile = RawServer.listen();
    opened.push(hostile);
    const honestConnect = Client.connect(honest.address, { connectTimeoutMs: 8000 });
    const honestEndpoint = await honest.accepted();
    const hostileConnect = Client.connect(hostile.address, { connectTimeoutMs: 2000 }).then(() => 'connected', (error: GdrpcError) => error.code);
    const hostileEndpoint = await hostile.accepted();
    const unused = [clientPort(honestEndpoint), clientPort(hostileEndpoint)].reduce((a, b) => Math.max(a, b)) + 1;
    await hostile.hello({ cp: null });
    await hostile.hello({ cp: unused });
    await honest.admit();
    opened.push(await honestConnect);
    expect(await hostileConnect).toBe(Code.UNAVAILABLE);
  });

  it('results the client refuses fail the call at once, not after the bytes it waits to refuse', async () => {
    // A RESPONSE whose tensor does not match the method (f32 for u8), bytes never sent: the call
    // used to wait for them until transferTimeoutMs (30 s) whatever its deadline.
    const { raw, client } = await admittedClient();
    const started = performance.now();
    const call = client.unary(EchoDescriptor.methods.echo, { x: Tensor.fromArray(new Uint8Array(4)), tag: 'a' }, { deadline: 1000 });
    const request = (await raw.receive())?.find((f) => f.kind === FrameKind.Request);
    expect(request).toBeDefined();
    await raw.sendMessage(packMessage([{ kind: FrameKind.Response, call: request!.call, body: packr.pack({ v: 2, r: { y: { dt: 'f32', sh: [16384], n: 65536, mt: 'host', m: 't', x: 1 }, tag: 'a' } }) }]));
    const failure = await call.then(() => undefined, (error: GdrpcError) => error);
    expect([Code.INTERNAL, Code.DEADLINE_EXCEEDED]).toContain(failure?.code);
    // (It took until the client closed the silent connection: 10 s of liveness here, 30 s with a
    // server that kept it alive.)
    expect(performance.now() - started).toBeLessThan(5000);
  });
});

