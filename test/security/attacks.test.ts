// The attacker's view (docs/security.md): a raw peer on its own UCX context, in this process,
// against a gdrpc server in another. Each attack must fail with a clear error or the attacker's
// connection must close; the server must stay up, keep its memory to itself and keep serving a
// well-behaved client meanwhile.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code, GdrpcError, MemoryRegion, RemoteKey, Tensor, nativeStats } from '../../core/index.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { ConnectionKey, dataTag } from '../../core/wire/tag.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from '../rpc/fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { RawPeer } from '../rpc/fixtures/raw-peer.ts';
import { expectPoolsEmpty, serverStats } from '../rpc/fixtures/stats.ts';
import { patterned } from '../rpc/fixtures/tensors.ts';

const MiB = 1 << 20;
let server: ListeningPeer;
let good: Client;
let secret: { address: bigint; hex: string };

beforeAll(async () => {
  server = await startServer({
    poolBytes: 8 * MiB, maxTensorBytes: 8 * MiB, admissionTimeoutMs: 1000, transferTimeoutMs: 1000,
    maxConnectionsPerAddress: 12, token: 'the-token',
  });
  const [, address, hex] = /SECRET ([0-9a-f]+) ([0-9a-f]+)/.exec(server.output())!;
  secret = { address: BigInt(`0x${address}`), hex: hex! };
  good = await Client.connect(server.address, { token: 'the-token' });
});
afterAll(async () => {
  await good?.close();
  await disposePeers();
});

/** The well-behaved client is served (its latency is printed: a loaded CI box is no place to assert it). */
async function stillServing(label: string): Promise<void> {
  const started = performance.now();
  expect((await good.unary(EchoDescriptor.methods.ping, { n: 7 })).n).toBe(7);
  console.log(`[${label}] well-behaved call served in ${(performance.now() - started).toFixed(1)} ms`);
}

async function admitted(port = server.port): Promise<RawPeer> {
  const raw = await RawPeer.connect(port, { rma: true });
  await raw.auth('the-token');
  expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
  return raw;
}

/** A raw peer with an RMA-capable context and an rkey forged from its own host memory: over
 *  tcp/sm such an rkey is the same bytes whatever memory it was packed from. */
async function forgedRma(raw: RawPeer): Promise<{ buffer: ArrayBuffer; span: { region: MemoryRegion; offset: number; length: number }; rkey: RemoteKey }> {
  const buffer = new ArrayBuffer(4096);
  const region = MemoryRegion.map(raw.context, buffer);
  return { buffer, span: { region, offset: 0, length: 64 }, rkey: RemoteKey.unpack(raw.endpoint, region.packRkey()) };
}

describe('memory is never served to a peer', () => {
  for (const admittedFirst of [false, true]) {
    it(`${admittedFirst ? 'an admitted' : 'an unauthenticated'} peer's get of the server's secret reads nothing`, async () => {
      const raw = admittedFirst ? await admitted() : await RawPeer.connect(server.port, { rma: true });
      const { buffer, span, rkey } = await forgedRma(raw);
      try {
        const got = await Promise.race([
          raw.endpoint.get(span, secret.address, rkey).then(() => 'read', (e: GdrpcError) => `failed ${e.code}`),
          new Promise<string>((resolve) => setTimeout(() => resolve('no answer'), 2000)),
        ]);
        console.log(`[rma] get of the secret: ${got}`);
        expect(got).not.toBe('read');
        expect(Buffer.from(buffer, 0, 64).toString('hex')).not.toBe(secret.hex);
      } finally {
        await raw.worker.close();
        span.region.close();
        raw.context.close();
      }
      await stillServing('rma');
      expect((await serverStats(good)).secretIntact).toBe(secret.hex);
    });
  }

  it('asking for RMA results gets FAILED_PRECONDITION and no rkey', async () => {
    const raw = await admitted();
    try {
      await raw.sendBody(FrameKind.Request, 5, { svc: EchoDescriptor.name, m: 'echo', a: { x: { dt: 'u8', sh: [4], n: 4, mt: 'host', m: 'i', b: new Uint8Array(4) }, tag: 'r' }, mv: 'rma' });
      const frame = await raw.receive();
      expect(frame?.kind).toBe(FrameKind.Error);
      expect(frame?.body.code).toBe(Code.FAILED_PRECONDITION);
      expect(JSON.stringify(frame?.body)).not.toMatch(/"k"/);
    } finally {
      await raw.close();
    }
    await stillServing('rma results');
  });

  for (const [name, rkey, address] of [
    ['a random 256-byte rkey', new Uint8Array(256).map(() => Math.floor(Math.random() * 256)), 0x7fff_0000_0000n],
    ['an empty rkey at address 0', new Uint8Array(0), 0n],
    ['a truncated real-looking rkey', new Uint8Array([1, 2, 3]), 0xffff_ffff_ffff_ffffn],
  ] as const) {
    it(`an RMA descriptor with ${name} is INVALID_ARGUMENT; the server never unpacks it`, async () => {
      const raw = await admitted();
      try {
        await raw.sendBody(FrameKind.Request, 6, { svc: EchoDescriptor.name, m: 'checksum', a: { x: { dt: 'u8', sh: [4096], n: 4096, mt: 'host', m: 'r', x: 1, a: address, k: rkey } } });
        const frames = await raw.drain(500);
        const error = frames.find((f) => f.kind === FrameKind.Error);
        expect(error?.call).toBe(6);
        expect(error?.body.code).toBe(Code.INVALID_ARGUMENT);
        expect(frames.some((f) => f.kind === FrameKind.Fin)).toBe(true);
      } finally {
        await raw.close();
      }
      await stillServing('rkey');
    });
  }

  it('a remote handle where tensor bytes are declared is INVALID_ARGUMENT', async () => {
    const raw = await admitted();
    try {
      await raw.sendBody(FrameKind.Request, 8, { svc: EchoDescriptor.name, m: 'checksum', a: { x: { dt: 'u8', sh: [4], n: 4, mt: 'host', m: 'h', o: '127.0.0.1:1', x: 1, s: new Uint8Array(16) } } });
      const frame = await raw.receive();
      expect([frame?.kind, frame?.call, frame?.body.code]).toEqual([FrameKind.Error, 8, Code.INVALID_ARGUMENT]);
    } finally {
      await raw.close();
    }
  });
});

describe('no frame or byte reaches another connection', () => {
  it('frames under guessed keys (random, sequential, the HELLO key) run nothing and touch no call', async () => {
    const raw = await RawPeer.connect(server.port);
    const before = (await serverStats(good)).runs;
    // A victim call in flight while the attacker tries to cancel it and to run handlers.
    const victim = good.unary(EchoDescriptor.methods.sleep, { ms: 600 });
    try {
      const request = { svc: EchoDescriptor.name, m: 'ping', a: { n: 1 } };
      const keys = [0n, ...Array.from({ length: 300 }, (_, i) => BigInt(i + 1)),
        ...Array.from({ length: 300 }, () => ConnectionKey.draw(() => true).value),
        raw.serverKey + 1n, raw.serverKey - 1n, raw.serverKey ^ 0xffffn];
      for (const key of keys) {
        for (let call = 1; call <= 3; call += 1) {
          await raw.sendBody(FrameKind.Request, call, request).then(() => {}, () => {});
          await raw.sendBytes(FrameKind.Cancel, call, Buffer.from([0x81, 0xa1, 0x76, 0x02]), key).catch(() => {});
          await raw.sendBytes(FrameKind.Request, call, Buffer.from([0x80]), key).catch(() => {});
        }
      }
      expect(await victim).toEqual({ aborted: false });
      const after = (await serverStats(good)).runs;
      expect(after.ping ?? 0).toBe((before.ping ?? 0));
      // Its own frames before AUTH are not processed either: the first one closed it.
      expect(await raw.closedWithin(3000)).toBe('closed');
    } finally {
      await raw.close();
    }
    await stillServing('spoofing');
  });

  it('tensor bytes under another connection\'s guessed tag do not replace a victim\'s argument', async () => {
    const raw = await admitted();
    try {
      const x = patterned(2 * MiB, 5);
      const expected = (await good.unary(EchoDescriptor.methods.checksum, { x })).sum;
      // Flood payload tags of random keys (and of the attacker's own prefix) while the victim sends.
      const junk = new Uint8Array(2 * MiB).fill(0xee);
      const flood = Promise.all(Array.from({ length: 64 }, (_, i) => raw.endpoint.tagSend(dataTag(ConnectionKey.draw(() => true), i), junk.subarray(0, 4096)).catch(() => {})));
      const results = await Promise.all(Array.from({ length: 3 }, () => good.unary(EchoDescriptor.methods.checksum, { x })));
      await flood;
      expect(results.map((r) => r.sum)).toEqual(Array(3).fill(expected));
    } finally {
      await raw.close();
    }
    await stillServing('payload spoofing');
  });

  // Control messages are decoded in place in the server's one receive buffer (wire/codec.ts
  // decodeFrame). msgpackr's bundled-strings extension (0x62) sets its read position, once the
  // value is read, to where the body says its bundle ends: a string that runs past the body's end
  // is then not caught as an over-read, and whatever lay past the message would come back in the
  // error that names the unknown method. The buffer is cleared past each message (the dispatcher's
  // ReceiveBuffer), and since frame bodies must be plain msgpack (wire/plain.ts) the extension is
  // refused before msgpackr reads it.
  it('a frame that would make msgpack read past its message is refused unread, and never shows an earlier message of another peer', async () => {
    const victim = await admitted();
    const attacker = await admitted();
    try {
      const secret = 'VICTIM-SECRET-'.repeat(40);
      await victim.sendBody(FrameKind.Request, 1, { svc: secret, m: 'ping', a: { n: 1 } });
      const refused = await victim.receive();
      expect([refused?.kind, refused?.body.code]).toEqual([FrameKind.Error, Code.NOT_FOUND]);
      // The victim's message (about 600 bytes) sits in the buffer now; the attacker's is 34.
      await attacker.sendBytes(FrameKind.Request, 1, overReadingRequest(250));
      const answer = await attacker.receive();
      expect([answer?.kind, answer?.body.code]).toEqual([FrameKind.Error, Code.INVALID_ARGUMENT]);
      const message = String(answer?.body.msg);
      expect(message).toMatch(/REQUEST frame body holds a msgpack extension \(0xd6\)/);
      expect(message).not.toMatch(/VICTIM|SECRET/);
    } finally {
      await Promise.all([victim.close(), attacker.close()]);
    }
    await stillServing('reading past a message');
  });
});

/** A REQUEST body `{ v: 2, svc: 'x', m: <str> }` whose `m` is declared `runPast` bytes longer than
 *  the body holds, behind a bundled-strings extension whose bundle (two empty strings) is the
 *  body's last two bytes: msgpackr reads the string past the end, then moves its position back to
 *  the bundle's end, the body's end, and reports no over-read. */
function overReadingRequest(runPast: number): Uint8Array {
  const own = [0x41, 0x41, 0xa0, 0xa0];
  if (own.length + runPast > 0xff) throw new RangeError('a str8 holds at most 255 bytes');
  const value = [0x83, 0xa1, 0x76, 0x02, 0xa3, 0x73, 0x76, 0x63, 0xa1, 0x78, 0xa1, 0x6d, 0xd9, own.length + runPast, ...own];
  const body = [0xd6, 0x62, 0, 0, 0, 0, ...value];
  // From the end of the extension's 4 data bytes to the bundle, plus those 4 bytes.
  const bundleAt = body.length - 2 - 6 + 4;
  body[5] = bundleAt;
  return Uint8Array.from(body);
}

describe('admission and limits', () => {
  it('a peer that only sends KEEPALIVE is closed after the admission timeout', async () => {
    const raw = await RawPeer.connect(server.port);
    const timer = setInterval(() => { raw.sendBody(FrameKind.Keepalive, 0, {}).catch(() => {}); }, 100);
    try {
      expect(await raw.closedWithin(10_000)).toBe('closed');
    } finally {
      clearInterval(timer);
      await raw.close();
    }
    await stillServing('keepalive-only');
  });

  it('connections beyond the per-address cap are refused; closing some makes room', async () => {
    const opened: RawPeer[] = [];
    try {
      let refused = 0;
      for (let i = 0; i < 14; i += 1) {
        try {
          opened.push(await admitted());
        } catch {
          refused += 1;
        }
      }
      // 12 per address, the well-behaved client holds one: the server never holds more.
      expect(refused).toBeGreaterThan(0);
      expect((await serverStats(good)).connections).toBeLessThanOrEqual(12);
      await stillServing('cap');
      await Promise.all(opened.splice(0, 3).map((raw) => raw.close()));
      await expect.poll(async () => (await serverStats(good)).connections, { timeout: 10_000 }).toBeLessThanOrEqual(9);
      opened.push(await admitted());
    } finally {
      await Promise.all(opened.map((raw) => raw.close()));
    }
  });

  it('announced tensors whose bytes never come release their pool blocks after the transfer timeout', async () => {
    const raw = await admitted();
    try {
      for (const call of [11, 12]) {
        await raw.sendBody(FrameKind.Request, call, { svc: EchoDescriptor.name, m: 'checksum', a: { x: { dt: 'u8', sh: [4 * MiB], n: 4 * MiB, mt: 'host', m: 't', x: call } } });
      }
      // The attacker's connection is closed once the bytes are overdue; the pool is whole again.
      expect(await raw.closedWithin(10_000)).toBe('closed');
      await expectPoolsEmpty(good);
      const x = patterned(6 * MiB, 1);
      expect((await good.unary(EchoDescriptor.methods.checksum, { x })).n).toBe(6 * MiB);
    } finally {
      await raw.close();
    }
  });

  it('bytes announced after an earlier transfer arrived still get their own whole transfer timeout', async () => {
    const raw = await admitted();
    try {
      // An honest call first: its transfer is watched until its bytes arrive. The connection's
      // watch timer is then left to run out by itself (it is not cleared when no watch is left).
      const own = new ConnectionKey(raw.serverKey);
      await raw.sendBody(FrameKind.Request, 21, { svc: EchoDescriptor.name, m: 'checksum', a: { x: { dt: 'u8', sh: [4096], n: 4096, mt: 'host', m: 't', x: 21 } } });
      await raw.endpoint.tagSend(dataTag(own, 21), new Uint8Array(4096).fill(3));
      expect((await raw.receive())?.kind).toBe(FrameKind.Response);
      // Half-way through the first watch's 1,000 ms, bytes that never come are announced.
      await new Promise((resolve) => setTimeout(resolve, 500));
      const announced = performance.now();
      await raw.sendBody(FrameKind.Request, 22, { svc: EchoDescriptor.name, m: 'checksum', a: { x: { dt: 'u8', sh: [4096], n: 4096, mt: 'host', m: 't', x: 22 } } });
      // The first watch's timer finds them young and waits again: the close comes after their own
      // 1,000 ms (timers never fire early), not when the first watch's time ran out.
      expect(await raw.closedWithin(10_000)).toBe('closed');
      expect(performance.now() - announced).toBeGreaterThanOrEqual(950);
      await expectPoolsEmpty(good);
    } finally {
      await raw.close();
    }
  });

  // Transfer ids are unique among a sender's live transfers (docs/wire.md). Two receives of one id
  // and one payload: the payload matched one, whose watch then ended for both, and the other held
  // its pool block unwatched for as long as the peer kept the connection alive (past the transfer
  // timeout, the call itself long over: an honest client then waited for memory in vain).
  const reused: Array<[string, (raw: RawPeer, x: number) => Promise<void>]> = [
    ['twice in one frame', async (raw, x) => {
      const t = { dt: 'u8', sh: [4 * MiB], n: 4 * MiB, mt: 'host', m: 't', x };
      await raw.sendBody(FrameKind.Request, 31, { svc: EchoDescriptor.name, m: 'echoList', a: { xs: [t, t] } });
    }],
    ['by two calls', async (raw, x) => {
      for (const call of [32, 33]) await raw.sendBody(FrameKind.Request, call, { svc: EchoDescriptor.name, m: 'checksum', a: { x: { dt: 'u8', sh: [2 * MiB], n: 2 * MiB, mt: 'host', m: 't', x } } });
    }],
    ['by two gathers', async (raw, x) => {
      const g = (f: number) => ({ dt: 'u8', sh: [MiB], n: MiB, mt: 'host', m: 'g', x, f });
      for (const call of [34, 35]) await raw.sendBody(FrameKind.Request, call, { svc: EchoDescriptor.name, m: 'echoList', a: { xs: [g(0), g(MiB)] } });
    }],
  ];
  for (const [how, announce] of reused) {
    it(`a transfer id announced again ${how} while its bytes are awaited closes the connection; the pool is whole again`, async () => {
      const raw = await admitted();
      try {
        // Kept alive as an attacker would: only the transfer's own watch may end it.
        raw.keepAlive(200);
        const x = 77;
        await announce(raw, x);
        await new Promise((resolve) => setTimeout(resolve, 100));
        // One payload for the id (the connection may already be gone).
        await raw.endpoint.tagSend(dataTag(new ConnectionKey(raw.serverKey), x), new Uint8Array(4 * MiB).fill(1)).catch(() => {});
        expect(await raw.closedWithin(10_000)).toBe('closed');
        await expectPoolsEmpty(good);
        await stillServing(how);
      } finally {
        await raw.close();
      }
    });
  }

  it('a lone payload no frame announces is dropped after the hold time, with nothing else arriving', async () => {
    const raw = await admitted();
    try {
      const before = (await serverStats(good)).dropped.payloads;
      const own = new ConnectionKey(raw.serverKey);
      raw.keepAlive();
      await raw.endpoint.tagSend(dataTag(own, 4242), new Uint8Array(64)).catch(() => {});
      // Held for a frame that may still come (10 s), then dropped by the connection's own timer.
      await expect.poll(async () => (await serverStats(good)).dropped.payloads - before, { timeout: 30_000, interval: 500 }).toBe(1);
      // The connection is still open: the timer dropped it, not a close.
      expect(raw.endpoint.failed).toBe(false);
    } finally {
      await raw.close();
    }
  }, 60_000);

  it('payloads nobody receives are drained and dropped; a second flood reuses the memory of the first', async () => {
    const raw = await admitted();
    const flood = async (): Promise<void> => {
      const bytes = new Uint8Array(4096);
      for (let sent = 0; sent < 40_000; sent += 1000) {
        await Promise.all(Array.from({ length: 1000 }, (_, i) => raw.endpoint.tagSend(dataTag(ConnectionKey.draw(() => true), sent + i), bytes).catch(() => {})));
      }
    };
    try {
      // Liveness would close a silent peer after 10 s; a slow machine can take that long to
      // drain the first flood, and the second would then go nowhere.
      raw.keepAlive();
      const before = (await serverStats(good)).dropped.payloads;
      await flood();
      await stillServing('flood');
      // Every one of the 40,000 is taken out of UCX's queue and dropped (none is kept).
      await expect.poll(async () => (await serverStats(good)).dropped.payloads - before, { timeout: 20_000 }).toBeGreaterThanOrEqual(40_000);
      const rssAfterFirst = (await serverStats(good)).rss;
      expect(raw.endpoint.failed).toBe(false);
      await flood();
      await expect.poll(async () => (await serverStats(good)).dropped.payloads - before, { timeout: 20_000 }).toBeGreaterThanOrEqual(80_000);
      // 160 MiB more were sent: what the first flood made the server hold is reused, not added to.
      const growth = (await serverStats(good)).rss - rssAfterFirst;
      console.log(`[flood] server RSS grew ${(growth / MiB).toFixed(1)} MiB over the second 160 MiB flood`);
      expect(growth).toBeLessThan(48 * MiB);
      // Unannounced payloads under its own key close the attacker once it holds too many.
      expect(raw.endpoint.failed).toBe(false);
      const own = new ConnectionKey(raw.serverKey);
      await Promise.all(Array.from({ length: 200 }, (_, i) => raw.endpoint.tagSend(dataTag(own, 1000 + i), new Uint8Array(64)).catch(() => {})));
      expect(await raw.closedWithin(10_000)).toBe('closed');
    } finally {
      await raw.close();
    }
    await stillServing('flood');
  });

  it('after every attack: nothing allocated, and the native counters of the server are steady', async () => {
    await expectPoolsEmpty(good);
    const stats = await serverStats(good);
    expect(stats.activeCalls).toBe(1);
    expect(stats.native.requests ?? 0).toBeLessThan(16);
    expect(stats.secretIntact).toBe(secret.hex);
  });
});

describe('@remote in a process that only calls', () => {
  it('is refused (FAILED_PRECONDITION) instead of opening a listener nobody configured', async () => {
    const listenersBefore = nativeStats().listeners;
    const error = await good.unary(EchoDescriptor.methods.pullSum, { h: Tensor.fromArray(new Uint8Array(16)) }).catch((e: unknown) => e);
    expect((error as GdrpcError).code).toBe(Code.FAILED_PRECONDITION);
    expect((error as GdrpcError).message).toMatch(/serveRemoteTensors/);
    expect(nativeStats().listeners).toBe(listenersBefore);
  });
});

// UCX's TCP transport writes an incoming PUT request wherever the sender says, whatever the
// context's features. gdrpc turns TCP put off (UCX_TCP_PUT_ENABLE=n, core/native.ts), so the
// server no longer advertises it and a peer's UCX never sends one: the put below must neither
// write the secret nor crash the server at a wild address. A server started with the setting
// forced back on shows the attack is real (the secret is overwritten).
describe('puts to the server\'s memory', () => {
  async function putInto(victimEnv: Record<string, string>, target: (secret: bigint) => bigint): Promise<{ intact: boolean; alive: boolean }> {
    await using victim = await startServer({ token: 'the-token' }, victimEnv);
    const [, address, hex] = /SECRET ([0-9a-f]+) ([0-9a-f]+)/.exec(victim.output())!;
    const raw = await admitted(victim.port);
    const { span, rkey } = await forgedRma(raw);
    const observer = await Client.connect(victim.address, { token: 'the-token' });
    try {
      await Promise.race([raw.endpoint.put(span, target(BigInt(`0x${address}`)), rkey).catch(() => {}), new Promise((resolve) => setTimeout(resolve, 2000))]);
      await new Promise((resolve) => setTimeout(resolve, 300));
      const stats = await serverStats(observer).catch(() => undefined);
      return { intact: stats?.secretIntact === hex, alive: stats !== undefined && victim.child.exitCode === null && victim.child.signalCode === null };
    } finally {
      await observer.close();
      await raw.worker.close();
      span.region.close();
      raw.context.close();
      victim.kill();
    }
  }

  it('a put at the secret\'s address leaves it intact', async () => {
    expect(await putInto({}, (address) => address)).toEqual({ intact: true, alive: true });
  });

  it('a put at a wild address does not crash the server', async () => {
    expect(await putInto({}, () => 0x1000n)).toEqual({ intact: true, alive: true });
  });

  it('with UCX_TCP_PUT_ENABLE forced back to y, the same put overwrites the secret (why the default matters)', async () => {
    expect((await putInto({ UCX_TCP_PUT_ENABLE: 'y' }, (address) => address)).intact).toBe(false);
  });
});
