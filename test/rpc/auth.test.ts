// Admission by shared token: the right token gets in; a wrong or missing one gets
// UNAUTHENTICATED and a disconnect, runs no handler and never sees an rkey.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code, GdrpcError } from '../../core/index.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { MAX_HANDSHAKE_MESSAGE_BYTES } from '../../core/rpc/connection/inbound.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { RawPeer } from './fixtures/raw-peer.ts';
import { serverStats } from './fixtures/stats.ts';
import { patterned } from './fixtures/tensors.ts';

const TOKEN = 'correct horse battery staple';
let server: ListeningPeer;
let admitted: Client;

beforeAll(async () => {
  server = await startServer({ token: TOKEN });
  admitted = await Client.connect(server.address, { token: TOKEN });
});
afterAll(async () => {
  await admitted?.close();
  await disposePeers();
});

async function connectError(token: string | undefined): Promise<GdrpcError> {
  const error = await Client.connect(server.address, token === undefined ? {} : { token }).then((c) => c.close().then(() => undefined), (e: unknown) => e);
  expect(error).toBeInstanceOf(GdrpcError);
  return error as GdrpcError;
}

describe('admission', () => {
  it('the right token is admitted and calls work (including tensors by tag rendezvous)', async () => {
    const result = await admitted.unary(EchoDescriptor.methods.echo, { x: patterned(100_000), tag: 'ok' }, { mover: 'tag' });
    expect(result.tag).toBe('ok');
  });

  it('a wrong token is UNAUTHENTICATED', async () => {
    const error = await connectError('wrong');
    expect(error.code).toBe(Code.UNAUTHENTICATED);
    expect(error.message).toMatch(/wrong token/);
  });

  it('a missing token is UNAUTHENTICATED', async () => {
    expect((await connectError(undefined)).code).toBe(Code.UNAUTHENTICATED);
  });

  it('the token never travels: the proof differs per connection', async () => {
    const a = await RawPeer.connect(server.port);
    const b = await RawPeer.connect(server.port);
    try {
      expect(Buffer.from(a.hello!.chal as Uint8Array).equals(Buffer.from(b.hello!.chal as Uint8Array))).toBe(false);
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('a peer that skips or fails admission runs no handler and receives no rkey', async () => {
    const before = (await serverStats(admitted)).runs;
    for (const mode of ['skip', 'bad-proof'] as const) {
      const raw = await RawPeer.connect(server.port);
      try {
        if (mode === 'bad-proof') await raw.auth(undefined, new Uint8Array(32));
        // A request that would make the server answer with an RMA descriptor (rkey) if it ran.
        await raw.sendBody(FrameKind.Request, 1, { svc: EchoDescriptor.name, m: 'echo', a: { x: { dt: 'u8', sh: [4], n: 4, mt: 'host', m: 'i', b: new Uint8Array(4) }, tag: 'x' } });
        const frames = await raw.drain(700);
        expect(frames.every((f) => f.kind === FrameKind.Error)).toBe(true);
        expect(frames.some((f) => f.kind === FrameKind.Response || f.kind === FrameKind.Ready)).toBe(false);
        expect(JSON.stringify(frames.map((f) => Object.keys(f.body)))).not.toMatch(/"k"/);
        if (mode === 'bad-proof') expect(frames[0]?.body.code).toBe(Code.UNAUTHENTICATED);
      } finally {
        await raw.close();
      }
    }
    expect((await serverStats(admitted)).runs).toEqual(before);
  });

  // Before admission only the handshake's few hundred bytes are read: one AUTH carrying a map of
  // 300,000 keys (3.6 MB) held a server's event loop 78-99 ms to decode, before its token was
  // checked (scratch).
  it(`a message over ${MAX_HANDSHAKE_MESSAGE_BYTES} bytes before admission is refused unread, and the connection closed`, async () => {
    const raw = await RawPeer.connect(server.port);
    try {
      const filler = Object.fromEntries(Array.from({ length: 4000 }, (_, i) => [`k${i}`, i]));
      await raw.sendBody(FrameKind.Auth, 0, { key: raw.key.value, proof: new Uint8Array(32), ...filler });
      // Closed without an answer: no key was read to answer under.
      expect(await raw.closedWithin(10_000)).toBe('closed');
      expect(await raw.drain(200)).toEqual([]);
    } finally {
      await raw.close();
    }
    expect((await admitted.unary(EchoDescriptor.methods.ping, { n: 3 })).n).toBe(3);
    expect((await serverStats(admitted)).errors.at(-1)).toMatch(/sent a message of \d+ bytes before admission; the handshake's are under 16384/);
  });
});
