// Tensors of refused frames being turned away, across a runtime's connections
// (core/rpc/runtime/refusals.ts). A refused frame's tag payloads are each matched by a receive into
// one byte, held until the payload comes: a connection may have one frame's worth outstanding
// (16,384), about 3.5 KB of heap each, and nothing bounded their sum across connections (60 such
// connections: about 3.4 GB). Past four connections' worth, the one turning away the most closes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code } from '../../core/index.ts';
import { MAX_REFUSING_TENSORS } from '../../core/rpc/runtime/refusals.ts';
import { FrameKind, MAX_TENSORS_PER_FRAME } from '../../core/wire/frames.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from '../rpc/fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { RawPeer } from '../rpc/fixtures/raw-peer.ts';
import { serverStats } from '../rpc/fixtures/stats.ts';

let server: ListeningPeer;
let good: Client;

beforeAll(async () => {
  server = await startServer({ token: 't' });
  good = await Client.connect(server.address, { token: 't' });
});
afterAll(async () => {
  await good?.close();
  await disposePeers();
});

describe('tensors of refused frames, across the runtime', () => {
  it(`past ${MAX_REFUSING_TENSORS} the connection turning away the most is closed, not the one that tipped it over; the rest are served`, async () => {
    expect(MAX_REFUSING_TENSORS).toBe(4 * MAX_TENSORS_PER_FRAME);
    const peers: RawPeer[] = [];
    try {
      for (let i = 0; i < 5; i += 1) {
        const raw = await RawPeer.connect(server.port);
        await raw.auth('t');
        expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
        raw.keepAlive(500);
        peers.push(raw);
      }
      let x = 1;
      const list = (n: number): Record<string, unknown> => ({ xs: Array.from({ length: n }, () => ({ dt: 'u8', sh: [1], n: 1, mt: 'host', m: 't', x: x++ })) });
      /** A REQUEST for a method the server does not have, announcing `n` tag payloads that never
       *  come: refused (NOT_FOUND), its payloads turned away. */
      const refusedCall = async (raw: RawPeer, n: number): Promise<void> => {
        await raw.sendBody(FrameKind.Request, 1, { svc: EchoDescriptor.name, m: 'noSuchMethod', a: list(n) });
        const answer = await raw.receive(30_000);
        expect([answer?.kind, answer?.call, answer?.body.code]).toEqual([FrameKind.Error, 1, Code.NOT_FOUND]);
      };
      const [first, ...rest] = peers as [RawPeer, ...RawPeer[]];
      // Four connections at their own cap: the runtime's whole allowance, none over it.
      for (const raw of peers.slice(0, 4)) await refusedCall(raw, MAX_TENSORS_PER_FRAME);
      expect(await first.closedWithin(300)).toBe('open');
      // A fifth turns away 100: the first of the four (as many as any, and found first) is closed.
      await refusedCall(rest[3]!, 100);
      expect(await first.closedWithin(20_000)).toBe('closed');
      for (const raw of rest) expect(await raw.closedWithin(0)).toBe('open');
      const { disconnects } = await serverStats(good);
      expect(disconnects.filter((e) => /refused frames/.test(e))).toEqual([
        expect.stringMatching(new RegExp(`RESOURCE_EXHAUSTED.*has ${MAX_TENSORS_PER_FRAME} tensors of refused frames to turn away, the most while this runtime's connections turn away ${MAX_REFUSING_TENSORS + 100} \\(at most ${MAX_REFUSING_TENSORS} together`)),
      ]);
      expect((await good.unary(EchoDescriptor.methods.ping, { n: 5 })).n).toBe(5);
    } finally {
      await Promise.all(peers.map((raw) => raw.close()));
    }
  }, 120_000);
});
