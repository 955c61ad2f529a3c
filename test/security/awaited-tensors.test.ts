// Argument tensors a connection's calls are receiving at once are capped (MAX_AWAITED_TENSORS,
// core/rpc/server/server-call.ts). A frame carries at most 16,384 tensors, but a client could open
// up to maxCallsPerConnection calls that each announced 16,000 tensors whose bytes never come:
// ~1.8 KB of heap each, and a server ran out of heap after about 140 such calls (scratch, a helper
// session playing the attacker), before the transfer timeout could clean up.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code } from '../../core/index.ts';
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
