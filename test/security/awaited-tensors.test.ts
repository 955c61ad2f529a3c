// Argument tensors a connection's calls are receiving at once are capped (MAX_AWAITED_TENSORS,
// core/rpc/server/server-call.ts). A frame carries at most 16,384 tensors, but a client could open
// up to maxCallsPerConnection calls that each announced 16,000 tensors whose bytes never come:
// ~1.8 KB of heap each, and a server ran out of heap after about 140 such calls (scratch, a helper
// session playing the attacker), before the transfer timeout could clean up. Across connections
// the server caps them too (ServerOptions.maxAwaitedTensors).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code, Server } from '../../core/index.ts';
import { MAX_AWAITED_TENSORS } from '../../core/rpc/connection/connection.ts';
import { FrameKind, MAX_TENSORS_PER_FRAME } from '../../core/wire/frames.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from '../rpc/fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { RawPeer } from '../rpc/fixtures/raw-peer.ts';

let server: ListeningPeer;
let good: Client;

beforeAll(async () => {
  // No pool: each 1-byte tensor is allocated on its own, so that only the cap can refuse them.
  server = await startServer({ poolBytes: 0, token: 't' });
  good = await Client.connect(server.address, { token: 't' });
});
afterAll(async () => {
  await good?.close();
  await disposePeers();
});

describe('tensors awaited across a connection\'s calls', () => {
  it(`past ${MAX_AWAITED_TENSORS} the next call is refused RESOURCE_EXHAUSTED; other connections are served`, async () => {
    const raw = await RawPeer.connect(server.port);
    try {
      await raw.auth('t');
      expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
      raw.keepAlive(500);
      let x = 1;
      const frames = MAX_AWAITED_TENSORS / MAX_TENSORS_PER_FRAME;
      for (let call = 1; call <= frames; call += 1) {
        const xs = Array.from({ length: MAX_TENSORS_PER_FRAME }, () => ({ dt: 'u8', sh: [1], n: 1, mt: 'host', m: 't', x: x++ }));
        await raw.sendBody(FrameKind.Request, call, { svc: EchoDescriptor.name, m: 'echoList', a: { xs } });
      }
      // One more tensor, in a call of its own.
      await raw.sendBody(FrameKind.Request, 99, { svc: EchoDescriptor.name, m: 'checksum', a: { x: { dt: 'u8', sh: [1], n: 1, mt: 'host', m: 't', x: x++ } } });
      let answer: Record<string, unknown> | undefined;
      for (let frame = await raw.receive(20_000); frame !== undefined; frame = await raw.receive(20_000)) {
        // Only call 99 is answered: the others wait for their bytes.
        expect(frame.call).toBe(99);
        answer = frame.body;
        break;
      }
      expect(answer).toMatchObject({ code: Code.RESOURCE_EXHAUSTED, det: { limit: 'awaitedTensors' } });
      expect((await good.unary(EchoDescriptor.methods.ping, { n: 3 })).n).toBe(3);
    } finally {
      await raw.close();
    }
  }, 60_000);
});

describe('tensors awaited across the server', () => {
  it('past ServerOptions.maxAwaitedTensors a call on any connection is refused RESOURCE_EXHAUSTED; one that fits is taken', async () => {
    // Per connection the cap is 65,536; across connections nothing else bounded them: 8
    // connections holding announced tensors whose bytes never came held 2.9 GB of a server's heap
    // for transferTimeoutMs, and 12 ran it out of heap (a helper session, 2026-12-06).
    const capped = await startServer({ poolBytes: 0, token: 't', maxAwaitedTensors: 100 });
    const watcher = await Client.connect(capped.address, { token: 't' });
    const peers = await Promise.all([RawPeer.connect(capped.port), RawPeer.connect(capped.port)]);
    try {
      for (const raw of peers) {
        await raw.auth('t');
        expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
        raw.keepAlive(500);
      }
      const [a, b] = peers as [RawPeer, RawPeer];
      let x = 1;
      const list = (n: number): Record<string, unknown> => ({ xs: Array.from({ length: n }, () => ({ dt: 'u8', sh: [1], n: 1, mt: 'host', m: 't', x: x++ })) });
      await a.sendBody(FrameKind.Request, 1, { svc: EchoDescriptor.name, m: 'echoList', a: list(80) });
      // Call 1 waits for bytes that never come; the server holds its 80 tensors.
      await expect.poll(async () => (await watcher.unary(EchoDescriptor.methods.ping, { n: 1 })).n).toBe(1);
      await b.sendBody(FrameKind.Request, 1, { svc: EchoDescriptor.name, m: 'echoList', a: list(21) });
      const refused = await b.receive(20_000);
      expect([refused?.kind, refused?.call]).toEqual([FrameKind.Error, 1]);
      expect(refused?.body).toMatchObject({ code: Code.RESOURCE_EXHAUSTED, det: { retryable: true, limit: 'maxAwaitedTensors' } });
      expect(String(refused?.body.msg)).toMatch(/21 argument tensor\(s\) while the server's calls are receiving 80 \(ServerOptions.maxAwaitedTensors 100\)/);
      // 20 fit: that call waits for its bytes like a's, unanswered.
      await b.sendBody(FrameKind.Request, 2, { svc: EchoDescriptor.name, m: 'echoList', a: list(20) });
      expect(await b.receive(1500)).toBeUndefined();
      expect((await watcher.unary(EchoDescriptor.methods.ping, { n: 2 })).n).toBe(2);
    } finally {
      await Promise.all([...peers.map((raw) => raw.close()), watcher.close()]);
    }
  }, 60_000);

  it('maxAwaitedTensors is checked up front', () => {
    for (const value of [0, -1, 1.5, '10']) expect(() => Server.create({ maxAwaitedTensors: value as number })).toThrow(/INVALID_ARGUMENT.*maxAwaitedTensors/);
  });
});
