// Tensor payloads that no frame announced, across a runtime (core/rpc/runtime/held-bytes.ts). A
// connection holds 64 of them for a frame still on its way, but their size was not weighed: a peer
// whose UCX sends everything eager had each one read whole into the server, and one connection's
// 63 payloads of 64 MiB took a server to 4.1 GiB. The peer here sends eager 4 MiB payloads under
// its connection's tags, announced by no frame yet, against a 16 MiB limit: past it the newest
// are dropped (closing the connection instead lost thousands of honest connections under load,
// whose payloads come before their frames when the server is behind).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '../../core/index.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { Code } from '../../core/errors.ts';
import { ConnectionKey, dataTag } from '../../core/wire/tag.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from '../rpc/fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { RawPeer } from '../rpc/fixtures/raw-peer.ts';
import { serverStats } from '../rpc/fixtures/stats.ts';
import { patterned } from '../rpc/fixtures/tensors.ts';

const MiB = 1 << 20;
let server: ListeningPeer;
let good: Client;

beforeAll(async () => {
  server = await startServer({ runtimeOptions: { maxHeldPayloadBytes: 16 * MiB } });
  good = await Client.connect(server.address);
});
afterAll(async () => {
  await good?.close();
  await disposePeers();
});

/** A raw peer admitted by the server on `port` (READY read), kept alive; `config`: its UCX settings
 *  (RNDV_THRESH 'inf': everything it sends goes eager, whole into the server). */
async function admitted(port: number, config?: Record<string, string>): Promise<RawPeer> {
  const raw = await RawPeer.connect(port, config === undefined ? {} : { config });
  try {
    await raw.auth();
    expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
  } catch (error) {
    await raw.close();
    throw error;
  }
  raw.keepAlive(500);
  return raw;
}

/** A server whose 1 MiB pool a good client's call holds whole for 20 s: what arrives meanwhile
 *  waits for pool memory. `done` closes the client once its call has ended. */
async function fullPool(): Promise<{ port: number; holder: Client; done: () => Promise<void> }> {
  const small = await startServer({ poolBytes: 1 * MiB, maxPoolBytesPerConnection: 1 * MiB, poolWaitMs: 30_000 });
  const holder = await Client.connect(small.address);
  const holding = holder.unary(EchoDescriptor.methods.hold, { x: patterned(1 * MiB, 1), ms: 20_000 }, { mover: 'tag' }).catch((error: unknown) => error);
  const done = async (): Promise<void> => {
    await holder.close();
    await holding;
  };
  try {
    await expect.poll(async () => (await serverStats(holder)).pools.some((pool) => pool.used >= MiB), { timeout: 20_000, interval: 100 }).toBe(true);
  } catch (error) {
    await done();
    throw error;
  }
  return { port: small.port, holder, done };
}

describe('unannounced tensor payloads, across the runtime', () => {
  it('past maxHeldPayloadBytes the newest payloads are dropped and their calls fail RESOURCE_EXHAUSTED (retryable) when their frames come; the connection stays, the payloads held are served', async () => {
    // Eager, whole: the server's UCX holds every byte of each.
    const raw = await admitted(server.port, { RNDV_THRESH: 'inf' });
    try {
      const key = new ConnectionKey(raw.serverKey);
      const payload = Buffer.alloc(4 * MiB, 0x5a);
      for (let transfer = 1; transfer <= 8; transfer += 1) await raw.endpoint.tagSend(dataTag(key, transfer), payload);
      // The drain takes them out of UCX's queue: 8 x 4 MiB against 16 MiB, so 4 are held.
      await expect.poll(async () => (await serverStats(good)).dispatcher.droppedPayloads, { timeout: 20_000, interval: 100 }).toBeGreaterThanOrEqual(4);
      expect((await serverStats(good)).heldPayloadBytes).toBe(16 * MiB);
      const tensor = (x: number) => ({ x: { dt: 'u8', sh: [4 * MiB], n: 4 * MiB, mt: 'host', m: 't', x } });
      // The newest was dropped: its call fails at once, and never ran.
      await raw.sendBody(FrameKind.Request, 1, { svc: EchoDescriptor.name, m: 'checksum', a: tensor(8) });
      const refused = await raw.receive(20_000);
      expect([refused?.kind, refused?.call, refused?.body.code]).toEqual([FrameKind.Error, 1, Code.RESOURCE_EXHAUSTED]);
      expect(String(refused?.body.msg)).toMatch(/arguments\.x: its 4194304 bytes \(4 MiB\) of tensor bytes came before their frame was read and were dropped: the server's connections held more than 16777216 bytes \(16 MiB\) of such bytes \(RuntimeOptions\.maxHeldPayloadBytes\).*the call never ran, try again/);
      expect(refused?.body.det).toMatchObject({ retryable: true, limit: 'maxHeldPayloadBytes' });
      // The oldest is held: its call runs on its bytes.
      await raw.sendBody(FrameKind.Request, 2, { svc: EchoDescriptor.name, m: 'checksum', a: tensor(1) });
      const answered = await raw.receive(20_000);
      expect([answered?.kind, answered?.call]).toEqual([FrameKind.Response, 2]);
      expect(answered?.body.r).toEqual({ sum: 4 * MiB * 0x5a, n: 4 * MiB });
      expect(await raw.closedWithin(500)).toBe('open');
      expect((await serverStats(good)).heldPayloadBytes).toBe(12 * MiB);
      expect((await good.unary(EchoDescriptor.methods.ping, { n: 6 })).n).toBe(6);
    } finally {
      await raw.close();
    }
  }, 60_000);

  it('a connection sending more unannounced payloads than it may hold is still closed, dropped ones counted', async () => {
    const raw = await admitted(server.port, { RNDV_THRESH: 'inf' });
    try {
      const key = new ConnectionKey(raw.serverKey);
      const payload = Buffer.alloc(1 * MiB, 0x5a);
      // 16 held at most by weight, the rest dropped and remembered: 65 closes it (MAX_HELD_PAYLOADS 64).
      for (let transfer = 1; transfer <= 80 && !raw.endpoint.failed; transfer += 1) {
        await raw.endpoint.tagSend(dataTag(key, transfer), payload).catch(() => {});
      }
      expect(await raw.closedWithin(20_000)).toBe('closed');
      const { disconnects, heldPayloadBytes } = await serverStats(good);
      expect(disconnects.filter((e) => /tensor payloads that no frame announced/.test(e))).toEqual([
        expect.stringMatching(/RESOURCE_EXHAUSTED.* sent more than 64 tensor payloads that no frame announced/),
      ]);
      expect(heldPayloadBytes).toBe(0);
    } finally {
      await raw.close();
    }
  }, 60_000);

  it('a payload held before its frame, announced smaller than it is, closes the connection INVALID_ARGUMENT once the frame is read', async () => {
    // Announced, it would count for nothing while its receive waits for pool memory (a helper
    // session held 2.7 GiB against the 1 GiB limit so, each payload announced as 1 KiB).
    const raw = await admitted(server.port, { RNDV_THRESH: 'inf' });
    try {
      await raw.endpoint.tagSend(dataTag(new ConnectionKey(raw.serverKey), 1), Buffer.alloc(4 * MiB, 0x5a));
      await expect.poll(async () => (await serverStats(good)).heldPayloadBytes, { timeout: 20_000, interval: 100 }).toBe(4 * MiB);
      await raw.sendBody(FrameKind.Request, 1, { svc: EchoDescriptor.name, m: 'checksum', a: { x: { dt: 'u8', sh: [1024], n: 1024, mt: 'host', m: 't', x: 1 } } });
      expect(await raw.closedWithin(20_000)).toBe('closed');
      const { disconnects, heldPayloadBytes } = await serverStats(good);
      expect(disconnects.filter((e) => /announced as/.test(e))).toEqual([
        expect.stringMatching(/INVALID_ARGUMENT.* sent 4194304 bytes for transfer 1, which its frame announced as 1024/),
      ]);
      expect(heldPayloadBytes).toBe(0);
    } finally {
      await raw.close();
    }
  }, 60_000);

  it("a client stream's item whose payload was dropped fails the call, not retryable: its handler ran", async () => {
    const raw = await admitted(server.port, { RNDV_THRESH: 'inf' });
    try {
      const key = new ConnectionKey(raw.serverKey);
      const tensor = (x: number, n: number) => ({ x: { dt: 'u8', sh: [n], n, mt: 'host', m: 't', x } });
      await raw.sendBody(FrameKind.Request, 1, { svc: EchoDescriptor.name, m: 'sum', win: 16 });
      // Item 0, frame first: received by the running handler.
      await raw.sendBody(FrameKind.StreamItem, 1, { seq: 0, a: tensor(100, 1024) });
      await raw.endpoint.tagSend(dataTag(key, 100), Buffer.alloc(1024, 1));
      // 5 unannounced payloads of 4 MiB against 16 MiB: the 5th is dropped.
      const before = (await serverStats(good)).dispatcher.droppedPayloads;
      for (let x = 1; x <= 5; x += 1) await raw.endpoint.tagSend(dataTag(key, x), Buffer.alloc(4 * MiB, 0x5a));
      await expect.poll(async () => (await serverStats(good)).dispatcher.droppedPayloads, { timeout: 20_000, interval: 100 }).toBe(before + 1);
      await raw.sendBody(FrameKind.StreamItem, 1, { seq: 1, a: tensor(5, 4 * MiB) });
      let frame;
      do frame = await raw.receive(20_000); while (frame !== undefined && frame.kind === FrameKind.Credit);
      expect([frame?.kind, frame?.call, frame?.body.code]).toEqual([FrameKind.Error, 1, Code.RESOURCE_EXHAUSTED]);
      expect(String(frame?.body.msg)).toMatch(/Echo\.sum arguments\[1\]\.x: its 4194304 bytes .* were dropped: .*the call ran, its stream is cut/);
      expect(frame?.body.det).toMatchObject({ retryable: false, limit: 'maxHeldPayloadBytes' });
    } finally {
      await raw.close();
    }
  }, 60_000);

  it("a gather waiting for pool memory counts its members still to come in the pool's queue (its payload is held whole meanwhile)", async () => {
    const { port, holder, done } = await fullPool();
    let raw: RawPeer | undefined;
    try {
      raw = await admitted(port);
      // 8 members of 64 KiB in one payload: the first member's wait counts all 8.
      const xs = Array.from({ length: 8 }, (_, k) => ({ dt: 'u8', sh: [64 * 1024], n: 64 * 1024, mt: 'host', m: 'g', x: 7, f: k * 64 * 1024 }));
      await raw.sendBody(FrameKind.Request, 1, { svc: EchoDescriptor.name, m: 'echoList', a: { xs } });
      await expect.poll(async () => (await serverStats(holder)).pools.find((pool) => pool.waiting > 0)?.waitingBytes, { timeout: 10_000, interval: 50 }).toBe(8 * 64 * 1024);
    } finally {
      await raw?.close();
      await done();
    }
  }, 60_000);

  it('a payload larger than its frame announced, arriving while its receive waits for pool memory, closes the connection INVALID_ARGUMENT', async () => {
    // The raw peer's 1 KiB tensor waits for pool memory, its payload held meanwhile, without limit
    // of number or time. A 4 MiB payload under its transfer id would be held whole.
    const { port, holder, done } = await fullPool();
    let raw: RawPeer | undefined;
    try {
      raw = await admitted(port, { RNDV_THRESH: 'inf' });
      const before = (await serverStats(holder)).activeCalls;
      await raw.sendBody(FrameKind.Request, 1, { svc: EchoDescriptor.name, m: 'checksum', a: { x: { dt: 'u8', sh: [1024], n: 1024, mt: 'host', m: 't', x: 1 } } });
      // The frame is read (its call counted, its tensor waiting for the pool) before the payload is sent.
      await expect.poll(async () => (await serverStats(holder)).activeCalls, { timeout: 20_000, interval: 50 }).toBeGreaterThan(before);
      await raw.endpoint.tagSend(dataTag(new ConnectionKey(raw.serverKey), 1), Buffer.alloc(4 * MiB, 0x5a)).catch(() => {});
      expect(await raw.closedWithin(20_000)).toBe('closed');
      const { disconnects } = await serverStats(holder);
      expect(disconnects.filter((e) => /announced as/.test(e))).toEqual([
        expect.stringMatching(/INVALID_ARGUMENT.* sent 4194304 bytes for transfer 1, which its frame announced as 1024/),
      ]);
    } finally {
      await raw?.close();
      await done();
    }
  }, 60_000);
});
