// The message window (docs/wire.md "Message window") against peers that ignore it. UCX reads
// whatever a peer sends into its own queue, read or not: before the window, a peer flooding
// messages that are costly to decode grew a server's memory by about 700 MB a second, and the
// server's other clients lost their connections. The server here runs in another process; the
// attacker is a raw peer in this one.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code, GdrpcError } from '../../core/index.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { packMessage } from '../../core/wire/message.ts';
import { pack } from 'msgpackr';
import type { ChildProcess } from 'node:child_process';
import { HANDSHAKE_WINDOW_BYTES } from '../../core/rpc/connection/connection.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from '../rpc/fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { RawPeer } from '../rpc/fixtures/raw-peer.ts';
import { RawServer } from '../rpc/fixtures/raw-server.ts';
import { serverStats } from '../rpc/fixtures/stats.ts';
import { patterned } from '../rpc/fixtures/tensors.ts';
import { spawnStopping } from './fixtures/stopping.ts';

let server: ListeningPeer;
let good: Client;

beforeAll(async () => {
  // A server whose budget of opening windows is spent (maxWindowBytes 0): every connection opens
  // with 256 KiB, as on a server with many connections, and larger messages go on loans.
  server = await startServer({ poolBytes: 8 << 20, runtimeOptions: { maxWindowBytes: 0 } });
  good = await Client.connect(server.address);
});
afterAll(async () => {
  await good?.close();
  await disposePeers();
});

/** A KEEPALIVE whose body is a msgpack map of `bytes / 3` entries (valid, and slow to decode:
 *  about 2 ms per 256 KiB on the CPU box, against microseconds to send). */
function junkKeepalive(bytes: number): Uint8Array {
  const entries = Math.floor(bytes / 3);
  const body = Buffer.alloc(11 + entries * 3);
  body.set([0x82, 0xa1, 0x76, 0x02, 0xa1, 0x6a, 0xdf]);  // {v: 2, j: map32 ...}
  body.writeUInt32BE(entries, 7);
  for (let i = 0, at = 11; i < entries; i += 1, at += 3) body.set([0xa1, 0x6b, 0xa0], at);  // 'k': ''
  return packMessage([{ kind: FrameKind.Keepalive, call: 0, body }]);
}

async function admitted(): Promise<RawPeer> {
  const raw = await RawPeer.connect(Number(server.address.split(':')[1]));
  await raw.auth();
  expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
  return raw;
}

describe('message window', () => {
  it('a peer flooding costly messages without taking credit is closed once past its window; a client of the same server is served throughout', async () => {
    const raw = await admitted();
    raw.acknowledgesCredit = false;
    const message = junkKeepalive(64 * 1024);
    // At most 400 messages (25 MB, a hundred opening windows): without the window the peer is
    // never closed, and the test fails below. More would only measure how far UCX's queue grows
    // before the server reaches the window's end, which depends on how much CPU the server gets:
    // on a machine busy enough, 2,000 messages of 256 KiB (500 MB) queued before it did while
    // every connection opened with 8 MiB, and reading past them held the other client's
    // keepalives longer than its liveness.
    const MAX_MESSAGES = 400;
    let sent = 0;
    let refused: unknown;
    const flood = (async () => {
      for (; sent < MAX_MESSAGES; sent += 1) {
        try {
          await raw.sendMessage(message);
        } catch (error) {
          refused = error;
          return;
        }
        if (sent % 16 === 15) await new Promise((resolve) => setImmediate(resolve));
      }
    })();
    const pings: number[] = [];
    while (refused === undefined && sent < MAX_MESSAGES) pings.push((await good.unary(EchoDescriptor.methods.ping, { n: pings.length })).n as number);
    await flood;
    try {
      expect(await raw.closedWithin(30_000)).toBe('closed');
      expect(pings).toEqual(pings.map((_, i) => i));
      const stats = await serverStats(good);
      expect(stats.errors.some((e) => /RESOURCE_EXHAUSTED.*past its window \(262144 bytes, the credits it acknowledged and the loans it used/.test(e))).toBe(true);
      console.log(`[message-window] flood: ${sent} messages of 64 KiB sent${refused === undefined ? ' (all of them)' : ''} before the server closed the peer; ${pings.length} pings served meanwhile; server rss ${(stats.rss / 2 ** 20).toFixed(0)} MiB`);
    } finally {
      await raw.close();
    }
  });

  it(`before admission a peer may send ${HANDSHAKE_WINDOW_BYTES} bytes of messages, however small each`, async () => {
    const raw = await RawPeer.connect(Number(server.address.split(':')[1]));
    try {
      // Messages under the 16 KiB a single one may have before admission, none of them AUTH.
      const keepalive = junkKeepalive(12 * 1024);
      for (let i = 0; i < 8 && !raw.endpoint.failed; i += 1) await raw.sendMessage(keepalive).catch(() => {});
      expect(await raw.closedWithin(10_000)).toBe('closed');
      const errors = (await serverStats(good)).errors;
      expect(errors.some((e) => /bytes of messages past its window \(65536 bytes before admission/.test(e))).toBe(true);
    } finally {
      await raw.close();
    }
  });

  it('ACK frames on a call are counted and malformed: a peer flooding small messages of them is closed after 256', async () => {
    // 14 empty ACKs on calls 1000-1013, 126 bytes: before, such a message passed as the window's
    // own (uncounted) and each frame cost the server an ERROR and an 'error' event; a peer
    // sending them as fast as it could took a server to 5 GB and was never closed.
    // The peer keeps to the window (256 malformed frames weigh more than an opening window: one
    // that did not would be closed for that first).
    const raw = await admitted();
    raw.keepsWindow = true;
    const message = packMessage(Array.from({ length: 14 }, (_, i) => ({ kind: FrameKind.Ack, call: 1000 + i, body: new Uint8Array(0) })));
    expect(message.length).toBe(126);
    try {
      for (let i = 0; i < 5000 && !raw.endpoint.failed; i += 1) {
        await raw.sendMessage(message).catch(() => {});
        if (i % 64 === 63) await new Promise((resolve) => setImmediate(resolve));
      }
      expect(await raw.closedWithin(10_000)).toBe('closed');
      const { errors } = await serverStats(good);
      expect(errors.some((e) => /more than 256 malformed frames/.test(e))).toBe(true);
      expect((await good.unary(EchoDescriptor.methods.ping, { n: 7 })).n).toBe(7);
    } finally {
      await raw.close();
    }
  });

  it('an ACK of a credit the server never gave closes the connection INVALID_ARGUMENT', async () => {
    const raw = await admitted();
    try {
      await raw.sendBody(FrameKind.Ack, 0, { id: 12345 });
      const frame = await raw.receive(10_000);
      expect([frame?.kind, frame?.call, frame?.body.code]).toEqual([FrameKind.Error, 0, Code.INVALID_ARGUMENT]);
      expect(String(frame?.body.msg)).toMatch(/ACK of credit 12345, which is not the oldest/);
      expect(await raw.closedWithin(10_000)).toBe('closed');
    } finally {
      await raw.close();
    }
  });

  it('a client that sends several windows of messages gets its credits, acknowledges them and keeps its connection', async () => {
    // 4 KiB tensors go inline: 2,500 calls each way are about 10.5 MB of messages against the
    // server's window (256 KiB, and loans for messages over half of that), and as much back
    // against the client's.
    const client = await Client.connect(server.address);
    try {
      const { accepted, errors } = await serverStats(good);
      let next = 0;
      let bytes = 0;
      const worker = async (): Promise<void> => {
        for (let i = next++; i < 2500; i = next++) {
          const x = patterned(4096, i);
          const result = await client.unary(EchoDescriptor.methods.echo, { x, tag: `w${i}` });
          expect(result.tag).toBe(`w${i}`);
          bytes += 4096;
        }
      };
      await Promise.all(Array.from({ length: 32 }, worker));
      expect(bytes).toBeGreaterThan(8 << 20);
      const stats = await serverStats(good);
      expect(stats.accepted).toBe(accepted);  // the same connection throughout
      expect(stats.errors.slice(errors.length)).toEqual([]);
    } finally {
      await client.close();
    }
  });
});

describe('both ways at once', () => {
  it('256 calls of 64 KiB inline each way, in one turn, four times: both windows shut and open again, every call answered', async () => {
    // 16 MiB of requests and 16 MiB of results a round, in messages of 16 frames (1 MiB: each
    // over half an opening window, so each goes on a loan): both senders wait for credit and
    // loans at the same time, and they must still get through (the window's frames travel
    // outside the window).
    const client = await Client.connect(server.address);
    try {
      const { accepted, errors } = await serverStats(good);
      for (let round = 0; round < 4; round += 1) {
        const calls = Array.from({ length: 256 }, (_, i) => client.unary(EchoDescriptor.methods.echo, { x: patterned(64 * 1024, round * 256 + i), tag: `b${i}` }, { mover: 'inline', deadline: 60_000 }));
        const results = await Promise.all(calls);
        expect(results.map((r) => r.tag)).toEqual(results.map((_, i) => `b${i}`));
        expect(results.every((r, i) => (r.y as ReturnType<typeof patterned>).equals(patterned(64 * 1024, round * 256 + i)))).toBe(true);
      }
      const stats = await serverStats(good);
      expect(stats.accepted).toBe(accepted);
      expect(stats.errors.slice(errors.length)).toEqual([]);
    } finally {
      await client.close();
    }
  });
});

describe("what waits for peers' windows, across the server", () => {
  /** An admitted raw peer announcing a window (64 KiB by default) it never credits unless a test
   *  says so: the server's answers to it wait in the server's outbox. It keeps to the server's
   *  window (a few MiB here need no credit). */
  async function neverCredits(port: number, win = 64 * 1024): Promise<RawPeer> {
    const raw = await RawPeer.connect(port);
    await raw.auth(undefined, undefined, { win });
    expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
    raw.keepsWindow = true;
    raw.keepAlive();
    return raw;
  }
  /** `count` REQUESTs for a service the server does not have, 16 to a message: each is answered
   *  with an ERROR that waits. */
  async function unknownCalls(raw: RawPeer, first: number, count: number): Promise<void> {
    const body = pack({ v: 2, svc: 'no.such.Service', m: 'none' });
    for (let call = first; call < first + count; call += 16) {
      await raw.sendMessage(packMessage(Array.from({ length: 16 }, (_, i) => ({ kind: FrameKind.Request, call: call + i, body }))));
    }
  }
  const MiB = 1 << 20;


  it("past the runtime's maxWaitingBytes the connection whose peer has gone longest without taking any is closed, not the one holding the most; one alone past it is closed too", async () => {
    // 20 MiB for the whole server, below each connection's own 32 MiB: a waiting ERROR counts
    // about 4.2 KB (4 KiB a frame besides its bytes).
    const capped = await startServer({ runtimeOptions: { maxWaitingBytes: 20 * MiB } });
    const port = Number(capped.address.split(':')[1]);
    const watcher = await Client.connect(capped.address);
    const b = await neverCredits(port, MiB);
    const a = await neverCredits(port);
    try {
      // b holds first, and the most: its 4,000 ERRORs past its 1 MiB window wait, about 12.5 MB;
      // then a's 1,000 past its 64 KiB window, about 3.9 MB.
      await unknownCalls(b, 1, 4000);
      await expect.poll(async () => (await serverStats(watcher)).waiting, { timeout: 20_000, interval: 100 }).toBeGreaterThan(11 * MiB);
      await unknownCalls(a, 1, 1000);
      await expect.poll(async () => (await serverStats(watcher)).waiting, { timeout: 20_000, interval: 100 }).toBeGreaterThan(15 * MiB);
      // b takes about 1.8 MiB (two credits, the second for what the first let go): more than the
      // MiB that counts as taking something. a has taken nothing since it began to hold.
      await credit(b, MiB - 64 * 1024, 1);
      await credit(b, MiB - 128 * 1024, 1);
      await expect.poll(async () => (await serverStats(watcher)).waiting, { timeout: 20_000, interval: 100 }).toBeLessThan(11 * MiB);
      expect([await a.closedWithin(200), await b.closedWithin(0)]).toEqual(['open', 'open']);
      // b's 3,000 more take the server past 20 MiB: a goes, though b holds about four times as much.
      await unknownCalls(b, 10_000, 3000);
      expect(await a.closedWithin(20_000)).toBe('closed');
      expect(await b.closedWithin(500)).toBe('open');
      const stats = await serverStats(watcher);
      expect(stats.waiting).toBeGreaterThan(15 * MiB);
      expect(stats.waiting).toBeLessThanOrEqual(20 * MiB);
      expect(stats.disconnects.filter((e) => /maxWaitingBytes/.test(e))).toHaveLength(1);
      expect(stats.disconnects.find((e) => /maxWaitingBytes/.test(e))).toMatch(/RESOURCE_EXHAUSTED.*has gone \d+ ms without taking 1 MiB of its messages, the longest of the connections on this runtime that hold 2\d{7} bytes waiting for their peers \(messages, and answers waiting for room; [2-5]\d{6} of them its own; maxWaitingBytes 20971520/);
      // One connection alone past the limit is closed too, below its own 32 MiB: perhaps before
      // all 2,000 have left, its later sends then failing (1 run in 4 with two CPU hogs).
      await unknownCalls(b, 20_000, 2000).catch(() => { /* closed part-way: what is asserted next */ });
      expect(await b.closedWithin(20_000)).toBe('closed');
      await expect.poll(async () => (await serverStats(watcher)).waiting, { timeout: 10_000, interval: 100 }).toBe(0);
      expect((await watcher.unary(EchoDescriptor.methods.ping, { n: 3 })).n).toBe(3);
    } finally {
      await Promise.all([a.close(), b.close(), watcher.close()]);
    }
  });

  it.each([
    ['takes nothing', 0],
    ['takes 256 KiB every 250 ms', 250],
  ])('a peer that asks and %s while more than 32 MiB waits for it is closed once the oldest waiting message has waited its liveness time; other clients are served throughout', async (_, creditEveryMs) => {
    // Liveness 3 s (the oldest message may wait that long), and a runtime limit far above what
    // this peer makes the server hold.
    const stalled = await startServer({ livenessMs: 3000 });
    const port = Number(stalled.address.split(':')[1]);
    const watcher = await Client.connect(stalled.address);
    // A window of 1 MiB: each credit may give back what the one before let the server send.
    const raw = await neverCredits(port, MiB);
    let crediting: NodeJS.Timeout | undefined;
    try {
      // Up to 24,000 ERRORs of about 4.2 KB counted each wait: three times 32 MiB, if the peer
      // is not closed first (its later sends then fail).
      const asking = unknownCalls(raw, 1, 24_000).catch(() => {});
      await expect.poll(async () => (await serverStats(watcher)).waiting, { timeout: 20_000, interval: 100 }).toBeGreaterThan(32 * MiB);
      // About 26 MB of window weight waits (1 KiB a frame besides the bytes): taking 1 MiB a
      // second (about 4 MB counted), the peer takes more than 1 MiB within its liveness time, and
      // the rest stays over 32 MiB for about 16 s.
      let id = 1;
      if (creditEveryMs > 0) crediting = setInterval(() => { void credit(raw, 256 * 1024, id++).catch(() => {}); }, creditEveryMs);
      expect(await raw.closedWithin(30_000)).toBe('closed');
      await asking;
      const stats = await serverStats(watcher);
      const reason = stats.disconnects.find((e) => /waiting for its window, the oldest for/.test(e));
      expect(reason).toMatch(/RESOURCE_EXHAUSTED.*has left \d+ bytes of messages \(\d+ frames\) waiting for its window, the oldest for \d+ ms/);
      expect(Number(/the oldest for (\d+) ms/.exec(reason!)![1])).toBeGreaterThanOrEqual(3000);
      await expect.poll(async () => (await serverStats(watcher)).waiting, { timeout: 10_000, interval: 100 }).toBe(0);
      expect((await watcher.unary(EchoDescriptor.methods.ping, { n: 4 })).n).toBe(4);
    } finally {
      clearInterval(crediting);
      await Promise.all([raw.close(), watcher.close()]);
    }
  });

  it("a peer whose process stopped while answers were on their way: what the server handed UCX for it past 8 MiB counts, and past maxWaitingBytes it is closed; other clients are served throughout", async () => {
    // Small socket buffers on the server's side (64 KiB asked, the kernel doubles it): what its
    // frozen peer does not read stays with UCX, not the kernel. Twenty answers of 1 MiB fit the
    // 64 MiB window the peer announced, so none waits for it: before UCX's share was counted, they
    // held the server's memory until liveness, however many such peers there were. The first
    // 8 MiB in UCX's hands are not counted (what an honest client that is slow to read has there).
    const capped = await startServer({ runtimeOptions: { maxWaitingBytes: 4 * MiB } }, { UCX_TCP_SNDBUF: '65536' });
    const watcher = await Client.connect(capped.address);
    const { child: frozen, started } = spawnStopping('frozen-client.ts', [capped.port, 20, 300, MiB, 64 * MiB], { ...process.env, UCX_TCP_RCVBUF: '65536' });
    try {
      expect(await started).toBe(true);
      const pings: number[] = [];
      await expect.poll(async () => {
        pings.push((await watcher.unary(EchoDescriptor.methods.ping, { n: pings.length })).n as number);
        return (await serverStats(watcher)).disconnects.filter((e) => /maxWaitingBytes/.test(e));
      }, { timeout: 30_000, interval: 100 }).toHaveLength(1);
      const stats = await serverStats(watcher);
      expect(stats.disconnects.find((e) => /maxWaitingBytes/.test(e))).toMatch(/RESOURCE_EXHAUSTED.*has gone \d+ ms without taking 1 MiB of its messages.*maxWaitingBytes 4194304/);
      expect(pings).toEqual(pings.map((_, i) => i));
      await expect.poll(async () => (await serverStats(watcher)).waiting, { timeout: 10_000, interval: 100 }).toBe(0);
    } finally {
      frozen.kill('SIGKILL');
      await watcher.close();
    }
  });
});

describe("a backlog of other peers' messages", () => {
  /** `count` admitted raw peers that keep to the window, heard from every 150 ms until a flood
   *  (their liveness 60 s). */
  async function floodPeers(port: number, count: number): Promise<RawPeer[]> {
    const peers: RawPeer[] = [];
    for (let i = 0; i < count; i += 1) {
      const raw = await RawPeer.connect(port);
      peers.push(raw);
      await raw.auth(undefined, undefined, { live: 60_000 });
      expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
      raw.keepsWindow = true;
      raw.keepAlive(150);
    }
    return peers;
  }

  /** Each peer sends `messages` messages of 64 KiB slow to decode, as fast as its window lets
   *  them go (whole windows of 8 MiB: 16 connections fit the server's maxWindowBytes), then a
   *  ping (call 1):
   *  resolves with when each got its answer, i.e. when the server had read its flood. */
  function flood(peers: RawPeer[], messages: number): Promise<number[]> {
    const message = junkKeepalive(64 * 1024);
    for (const raw of peers) raw.keepAlive(3_600_000);
    return Promise.all(peers.map(async (raw, i) => {
      const sends = Array.from({ length: messages }, () => raw.sendMessage(message));
      sends.push(raw.sendBody(FrameKind.Request, 1, { svc: EchoDescriptor.name, m: 'ping', a: { n: 100 + i } }));
      await Promise.all(sends);
      const answer = await raw.receive(120_000);
      expect(answer).toMatchObject({ kind: FrameKind.Response, call: 1 });
      // Its backlog read, it speaks again: a peer silent past a short liveness is closed for it
      // (with two CPU hogs the test's look at the closures came after all 16 were, besides the
      // stopped client the test is about).
      raw.keepAlive(150);
      return performance.now();
    }));
  }

  it("an honest client's calls are answered in turn while 16 peers' windows of messages slow to decode are read, not behind them", async () => {
    // UCX keeps every peer's control messages in one line. Read in that order, 8 peers keeping to
    // their windows with such messages held an honest client's ping 1.1 s at the median (a helper
    // session's attack, 2026-12-06). Behind, the server reads connections in turns
    // (runtime/turns.ts): the honest client's five pings, one after the other, are answered before
    // the peers' last messages are read.
    const busy = await startServer({});
    const honest = await Client.connect(busy.address);
    const peers = await floodPeers(Number(busy.address.split(':')[1]), 16);
    try {
      expect((await honest.unary(EchoDescriptor.methods.ping, { n: 0 })).n).toBe(0);
      const started = performance.now();
      const read = flood(peers, 120);
      const pings: number[] = [];
      for (let n = 1; n <= 5; n += 1) {
        const sent = performance.now();
        expect((await honest.unary(EchoDescriptor.methods.ping, { n })).n).toBe(n);
        pings.push(performance.now() - sent);
      }
      const pinged = performance.now();
      const readAt = Math.max(...await read);
      const { backlogs } = (await serverStats(honest)).dispatcher;
      console.log(`[message-window] 5 pings in ${(pinged - started).toFixed(0)} ms (slowest ${Math.max(...pings).toFixed(0)} ms) while the server read 16 x 120 messages of 64 KiB in ${(readAt - started).toFixed(0)} ms; ${backlogs} backlog(s) read in turns`);
      expect(pinged).toBeLessThan(readAt);
      expect(backlogs).toBeGreaterThan(0);
    } finally {
      await Promise.all([...peers.map((raw) => raw.close()), honest.close()]);
    }
  });

  it('a quiet client is not declared silent while its keepalives wait behind 16 windows of messages slow to decode; a stopped one is', async () => {
    // Liveness 600 ms both ways: 16 peers each send 7.5 MiB of maps slow to decode (their whole
    // windows: 16 fit the server's maxWindowBytes), never past them (so none is closed for it),
    // all at once. UCX queues every peer's
    // control messages in one line: the quiet client's keepalives wait behind them. The server
    // must read for longer than the liveness time on this machine for the test to tell anything
    // (it logs how long); either way the quiet client must keep its connection. A client process
    // stopped before the flood has nothing waiting: it is closed for silence all the same (a
    // runtime-wide excuse let one peer's flood keep every peer's liveness off).
    const busy = await startServer({ livenessMs: 600 });
    const port = Number(busy.address.split(':')[1]);
    const quiet = await Client.connect(busy.address, { livenessMs: 600 });
    const watcher = await Client.connect(busy.address, { livenessMs: 60_000 });
    let stopped: ChildProcess | undefined;
    let peers: RawPeer[] = [];
    try {
      // Heard from until the flood (the server's liveness is 600 ms): then their messages are.
      peers = await floodPeers(port, 16);
      // The client that stops itself, just before the flood.
      const frozen = spawnStopping('frozen-client.ts', [busy.port, 0, 0, 0]);
      stopped = frozen.child;
      expect(await frozen.started).toBe(true);
      const { accepted } = await serverStats(watcher);
      const started = performance.now();
      // When each peer's ping is answered, the server has read its messages.
      const readMs = Math.max(...await flood(peers, 120)) - started;
      const readAt = Date.now();
      expect((await quiet.unary(EchoDescriptor.methods.ping, { n: 2 })).n).toBe(2);
      const stats = await serverStats(watcher);
      expect(stats.accepted).toBe(accepted);
      // One connection was closed for silence: the stopped client's.
      await expect.poll(async () => (await serverStats(watcher)).disconnects.filter((e) => /silent/.test(e)), { timeout: 10_000, interval: 200 }).toHaveLength(1);
      const after = await serverStats(watcher);
      const closedAt = after.disconnectedAt[after.disconnects.findIndex((e) => /silent/.test(e))]!;
      // Where the backlog outlasted the liveness time well, the stopped client was closed while it
      // was being read (before the watcher's call behind it was answered), not only after.
      const duringBacklog = closedAt < readAt;
      if (readMs > 1500) expect(duringBacklog).toBe(true);
      expect((await quiet.unary(EchoDescriptor.methods.ping, { n: 3 })).n).toBe(3);
      console.log(`[message-window] 16 x 120 messages of 64 KiB read in ${readMs.toFixed(0)} ms (liveness 600 ms); quiet client kept, stopped client closed for silence ${duringBacklog ? `${readAt - closedAt} ms before the backlog was read` : 'after the backlog was read'}`);
    } finally {
      stopped?.kill('SIGKILL');
      await Promise.all([...peers.map((raw) => raw.close()), quiet.close(), watcher.close()]);
    }
  });
});

describe('loans of window, across the runtime', () => {
  const MiB = 1 << 20;

  it('an honest client\'s 3 MiB argument goes on a loan, both ways, and every loan comes back', async () => {
    const client = await Client.connect(server.address);
    try {
      const result = await client.unary(EchoDescriptor.methods.echo, { x: patterned(3 * MiB, 7), tag: 'big' }, { mover: 'inline' });
      expect(result.tag).toBe('big');
      expect((result.y as ReturnType<typeof patterned>).equals(patterned(3 * MiB, 7))).toBe(true);
      await expect.poll(async () => (await serverStats(good)).lentWindow, { timeout: 10_000, interval: 100 }).toMatchObject({ bytes: 0, waiting: 0 });
    } finally {
      await client.close();
    }
  });

  it('connections take their opening windows from maxWindowBytes at admission, never before, up to their whole window, and give them back at close', async () => {
    // Strangers may sit before admission for a minute here: long past the rest of the test.
    const capped = await startServer({ admissionTimeoutMs: 60_000, runtimeOptions: { maxWindowBytes: 8 * MiB } });
    const admit = async (): Promise<RawPeer> => {
      const raw = await RawPeer.connect(capped.port);
      await raw.auth();
      expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
      return raw;
    };
    const strangers = await Promise.all(Array.from({ length: 4 }, () => RawPeer.connect(capped.port)));
    const peers: RawPeer[] = [];
    let watcher: Client | undefined;
    try {
      // Every HELLO announces 256 KiB, and what a loan makes it.
      expect(strangers.map((raw) => [raw.hello?.win, raw.hello?.wmax])).toEqual(Array(4).fill([256 * 1024, 8 * MiB]));
      // Until 2026-12-06 the four strangers took the whole budget when they connected, and the
      // first admitted peer opened with 256 KiB; now it takes the budget, in READY.
      peers.push(await admit());
      expect(peers[0]!.window).toBe(8 * MiB);
      watcher = await Client.connect(capped.address);  // what is left: 256 KiB more
      expect((await serverStats(watcher)).lentWindow.opened).toBe(8 * MiB);
      await peers[0]!.close();
      await expect.poll(async () => (await serverStats(watcher!)).lentWindow.opened, { timeout: 10_000, interval: 50 }).toBe(256 * 1024);
      peers.push(await admit(), await admit());
      expect(peers.slice(1).map((raw) => raw.window)).toEqual([8 * MiB, 256 * 1024]);
      expect((await serverStats(watcher)).lentWindow.opened).toBe(8 * MiB);
      // The strangers were there all along, and are still.
      expect(strangers.every((raw) => !raw.endpoint.failed)).toBe(true);
    } finally {
      await Promise.all([...strangers, ...peers].map((raw) => raw.close()));
      await watcher?.close();
    }
  });

  it('a client without `rwin` (from before READY\'s `win`) keeps HELLO\'s window, takes none of the budget, and is served within it, larger messages on loans', async () => {
    const budget = await startServer();
    const watcher = await Client.connect(budget.address);
    const raw = await RawPeer.connect(budget.port);
    try {
      const opened = (await serverStats(watcher)).lentWindow.opened;
      await raw.auth(undefined, undefined, { rwin: false });
      const ready = await raw.receive();
      expect(ready?.kind).toBe(FrameKind.Ready);
      expect(ready?.body.win).toBeUndefined();
      expect(raw.window).toBe(256 * 1024);
      expect((await serverStats(watcher)).lentWindow.opened).toBe(opened);
      // 40 pings carrying 8 KiB of metadata each: about 360 KiB of messages, past the window, so
      // they go as the server credits every quarter of it. Credited a quarter of a widened window
      // instead, they would wait for ever.
      const padding = 'p'.repeat(8 * 1024);
      const sends: Array<Promise<void>> = [];
      for (let call = 1; call <= 40; call += 1) sends.push(raw.sendBody(FrameKind.Request, call, { svc: EchoDescriptor.name, m: 'ping', a: { n: call }, md: { padding } }));
      await Promise.all(sends);
      const answered = new Set<number>();
      while (answered.size < 40) {
        const frame = await raw.receive(10_000);
        if (frame === undefined) break;
        if (frame.kind === FrameKind.Response) answered.add(frame.call);
      }
      expect(answered.size).toBe(40);
      expect(raw.creditsTaken).toBeGreaterThan(0);
      // A message larger than that window goes on a loan.
      await raw.sendBody(FrameKind.Request, 41, { svc: EchoDescriptor.name, m: 'ping', a: { n: 41 }, md: { padding: 'q'.repeat(300 * 1024) } });
      expect(raw.loansTaken).toBe(1);
      const reply = await raw.receive(10_000);
      expect([reply?.kind, reply?.call]).toEqual([FrameKind.Response, 41]);
    } finally {
      await raw.close();
      await watcher.close();
    }
  });

  it('past maxLentWindowBytes a WANT waits for loans to come back, in order; a loan the next message does not use comes back with it', async () => {
    const capped = await startServer({ runtimeOptions: { maxLentWindowBytes: MiB, maxWindowBytes: 0 } });
    const watcher = await Client.connect(capped.address);
    const [a, b] = await Promise.all([RawPeer.connect(capped.port), RawPeer.connect(capped.port)]);
    try {
      for (const raw of [a, b]) {
        await raw.auth();
        expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
      }
      // a takes 900 KiB and sends nothing yet: b's 600 KiB do not fit beside it.
      await a.borrow(900 * 1024);
      expect((await serverStats(watcher)).lentWindow).toMatchObject({ bytes: 900 * 1024, waiting: 0 });
      const waited = b.borrow(600 * 1024, 20_000);
      await expect.poll(async () => (await serverStats(watcher)).lentWindow, { timeout: 10_000, interval: 50 }).toMatchObject({ bytes: 900 * 1024, waiting: 1 });
      expect(b.loansTaken).toBe(0);
      // a's next message, a KEEPALIVE, needs none of its loan: the loan comes back, b's comes.
      await a.sendBody(FrameKind.Keepalive, 0, {});
      await waited;
      expect(b.loansTaken).toBe(1);
      await expect.poll(async () => (await serverStats(watcher)).lentWindow, { timeout: 10_000, interval: 50 }).toMatchObject({ bytes: 600 * 1024, waiting: 0 });
      // b closes with its loan unused: it comes back too.
      await b.close();
      await expect.poll(async () => (await serverStats(watcher)).lentWindow, { timeout: 10_000, interval: 50 }).toMatchObject({ bytes: 0, waiting: 0 });
      expect((await watcher.unary(EchoDescriptor.methods.ping, { n: 1 })).n).toBe(1);
    } finally {
      await Promise.all([a.close(), b.close(), watcher.close()]);
    }
  });

  it('a second WANT before the first loan was acknowledged, or one past the server\'s largest window, closes the connection INVALID_ARGUMENT', async () => {
    for (const [wants, message] of [[[64 * 1024, 64 * 1024], /a WANT before the loan for the one before it was declined or used/], [[(8 << 20) + 1], /a WANT of 8388609 bytes of window \(from 1 to 8388608/]] as const) {
      const raw = await admitted();
      raw.acknowledgesCredit = false;
      try {
        for (const n of wants) await raw.sendBody(FrameKind.Want, 0, { n });
        expect(await raw.closedWithin(10_000)).toBe('closed');
        const { errors } = await serverStats(good);
        expect(errors.some((e) => message.test(e))).toBe(true);
      } finally {
        await raw.close();
      }
    }
  });

  it('a WANT while a loan taken is unused is refused, and both loans come back (they leaked, a helper session found)', async () => {
    const capped = await startServer({ runtimeOptions: { maxLentWindowBytes: MiB, maxWindowBytes: 0 } });
    const watcher = await Client.connect(capped.address);
    const raw = await RawPeer.connect(capped.port);
    try {
      await raw.auth();
      expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
      await raw.borrow(500 * 1024);
      // Taken, nothing sent: before, a second WANT was allowed and its loan replaced the first,
      // whose 500 KiB never came back, and a 1 MiB budget then served no ask again.
      await raw.sendBody(FrameKind.Want, 0, { n: 500 * 1024 });
      expect(await raw.closedWithin(10_000)).toBe('closed');
      const stats = await serverStats(watcher);
      expect(stats.errors.some((e) => /a WANT before the loan for the one before it was declined or used/.test(e))).toBe(true);
      await expect.poll(async () => (await serverStats(watcher)).lentWindow, { timeout: 10_000, interval: 50 }).toMatchObject({ bytes: 0, waiting: 0 });
      // The budget serves again: an honest client's 900 KiB argument goes on a loan.
      const result = await watcher.unary(EchoDescriptor.methods.echo, { x: patterned(900 * 1024, 3), tag: 'after' }, { mover: 'inline' });
      expect(result.tag).toBe('after');
    } finally {
      await Promise.all([raw.close(), watcher.close()]);
    }
  });

  it('a loan taken and kept unused behind window frames alone closes the connection when its time runs out', async () => {
    // Liveness 1 s: the peer keeps it with CREDITs (uncounted, bounded by what the server sent
    // it: 100 answered pings) and never sends the message the loan was for.
    const quick = await startServer({ livenessMs: 1000, runtimeOptions: { maxWindowBytes: 0 } });
    const watcher = await Client.connect(quick.address);
    const raw = await RawPeer.connect(quick.port);
    try {
      await raw.auth(undefined, undefined, { live: 60_000 });
      expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
      for (let n = 0; n < 100; n += 1) {
        await raw.sendBody(FrameKind.Request, n + 1, { svc: EchoDescriptor.name, m: 'ping', a: { n } });
        expect((await raw.receive(10_000))?.call).toBe(n + 1);
      }
      await raw.borrow(MiB);
      const started = Date.now();
      let id = 1;
      while (!raw.endpoint.failed && Date.now() - started < 8000) {
        await credit(raw, 16 * 1024, id++).catch(() => {});
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
      expect(raw.endpoint.failed).toBe(true);
      const stats = await serverStats(watcher);
      expect(stats.disconnects.some((e) => /RESOURCE_EXHAUSTED.*did not acknowledge and use a loan of 1048576 bytes of message window within 1000 ms/.test(e))).toBe(true);
      expect(stats.lentWindow).toMatchObject({ bytes: 0, waiting: 0 });
    } finally {
      await Promise.all([raw.close(), watcher.close()]);
    }
  });

  it('a client whose large message waits behind others\' loans for longer than its liveness is not declared silent', async () => {
    // The client's liveness is 1 s. A raw peer takes the whole budget of loans and keeps it 2.5 s
    // (within its loan's time, the server's 4 s liveness), then uses it. The client's 900 KiB
    // argument waits for a loan meanwhile, and its keepalives wait behind it: before, the server
    // closed the client for silence after a second (a helper session found it).
    const quick = await startServer({ livenessMs: 4000, runtimeOptions: { maxWindowBytes: 0, maxLentWindowBytes: MiB } });
    const watcher = await Client.connect(quick.address, { livenessMs: 4000 });
    const holder = await RawPeer.connect(quick.port);
    const client = await Client.connect(quick.address, { livenessMs: 1000 });
    try {
      await holder.auth(undefined, undefined, { live: 60_000 });
      expect((await holder.receive())?.kind).toBe(FrameKind.Ready);
      await holder.borrow(MiB);
      const call = client.unary(EchoDescriptor.methods.echo, { x: patterned(900 * 1024, 5), tag: 'waited' }, { mover: 'inline', deadline: 30_000 });
      await expect.poll(async () => (await serverStats(watcher)).lentWindow.waiting, { timeout: 10_000, interval: 50 }).toBe(1);
      // The holder stays silent 2.5 s (its loan's time is the server's 4 s), then uses the loan.
      await new Promise((resolve) => setTimeout(resolve, 2500));
      await holder.sendBody(FrameKind.Keepalive, 0, {});
      expect((await call).tag).toBe('waited');
      const { disconnects } = await serverStats(watcher);
      expect(disconnects.filter((e) => /silent/.test(e))).toEqual([]);
    } finally {
      await Promise.all([holder.close(), client.close(), watcher.close()]);
    }
  });

  it('a loan not acknowledged within the liveness time closes the connection RESOURCE_EXHAUSTED, and comes back', async () => {
    const quick = await startServer({ livenessMs: 1000 });
    const watcher = await Client.connect(quick.address);
    const raw = await RawPeer.connect(quick.port);
    try {
      await raw.auth(undefined, undefined, { live: 60_000 });
      expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
      raw.acknowledgesCredit = false;
      raw.keepAlive(200);
      await raw.sendBody(FrameKind.Want, 0, { n: MiB });
      expect(await raw.closedWithin(10_000)).toBe('closed');
      const stats = await serverStats(watcher);
      expect(stats.disconnects.some((e) => /RESOURCE_EXHAUSTED.*did not acknowledge and use a loan of 1048576 bytes of message window within 1000 ms/.test(e))).toBe(true);
      expect(stats.lentWindow).toMatchObject({ bytes: 0, waiting: 0 });
    } finally {
      await Promise.all([raw.close(), watcher.close()]);
    }
  });
});

describe('the windows a peer announces', () => {
  it('a client announcing no window, or one past 256 MiB, is refused INVALID_ARGUMENT and closed', async () => {
    const port = Number(server.address.split(':')[1]);
    for (const [win, message] of [[undefined, /no message window/], [2 ** 31, /a message window of 2147483648 bytes \(from 65536 to 268435456\)/]] as const) {
      const raw = await RawPeer.connect(port);
      try {
        await raw.auth(undefined, undefined, { win });
        const frame = await raw.receive(10_000);
        expect([frame?.kind, frame?.call, frame?.body.code]).toEqual([FrameKind.Error, 0, Code.INVALID_ARGUMENT]);
        expect(String(frame?.body.msg)).toMatch(message);
        expect(await raw.closedWithin(10_000)).toBe('closed');
      } finally {
        await raw.close();
      }
    }
    expect((await good.unary(EchoDescriptor.methods.ping, { n: 4 })).n).toBe(4);
  });

  it('a server announcing no window, or one past 256 MiB, fails the connect UNAVAILABLE', async () => {
    for (const [win, message] of [[undefined, /announced no message window/], [2 ** 31, /announced a message window of 2147483648 bytes/]] as const) {
      const raw = RawServer.listen();
      try {
        // The client sends no AUTH: the raw server's wait for it ends with its close.
        void raw.admit({ win }).catch(() => {});
        const failure = await Client.connect(raw.address, { connectTimeoutMs: 10_000 }).then(() => undefined, (error: unknown) => error);
        expect(failure).toBeInstanceOf(GdrpcError);
        expect((failure as GdrpcError).code).toBe(Code.UNAVAILABLE);
        expect((failure as GdrpcError).message).toMatch(message);
      } finally {
        await raw.close();
      }
    }
  });
});

describe('a server that gives no credit', () => {
  it("the client's messages past the server's window wait (the calls run into their deadlines); a CREDIT lets them go, its ACK first", async () => {
    const raw = RawServer.listen();
    const window = 65_536;
    try {
      const admitting = raw.admit({ win: window });
      const client = await Client.connect(raw.address, { livenessMs: 60_000 });
      await admitting;
      // The client announces its own: an opening window (256 KiB and what its runtime's
      // maxWindowBytes had free), and what a loan makes it.
      expect(raw.auth?.wmax).toBe(8 << 20);
      expect(raw.auth?.win).toBeGreaterThanOrEqual(256 << 10);
      expect(raw.auth?.win).toBeLessThanOrEqual(8 << 20);
      try {
        // One call per turn, so one message each: 8 KiB inline arguments.
        const calls: Array<Promise<unknown>> = [];
        for (let i = 0; i < 12; i += 1) {
          calls.push(client.unary(EchoDescriptor.methods.echo, { x: patterned(8192, i), tag: `c${i}` }, { mover: 'inline', deadline: 1500 }).catch((e: unknown) => e));
          await new Promise((resolve) => setImmediate(resolve));
        }
        let before = raw.authBytes;
        const seen: number[] = [];
        for (let m = await raw.receiveMessage(1000); m !== undefined; m = await raw.receiveMessage(1000)) {
          before += m.length;
          seen.push(...m.frames.filter((f) => f.kind === FrameKind.Request).map((f) => f.call));
        }
        expect(before).toBeLessThanOrEqual(window);
        expect(seen.length).toBeGreaterThan(0);
        expect(seen.length).toBeLessThan(12);
        // The calls that never left time out on the client's clock.
        const outcomes = await Promise.all(calls);
        expect(outcomes.every((o) => o instanceof GdrpcError && o.code === Code.DEADLINE_EXCEEDED)).toBe(true);
        // Credit: the ACK comes first, in a message of its own, then what was waiting.
        // Credit for what the client sent so far: a credit for more than it sent is refused.
        await raw.sendMessage(packMessage([{ kind: FrameKind.Credit, call: 0, body: packCredit(before, 777) }]));
        const ack = await raw.receiveMessage(5000);
        expect(ack?.frames.map((f) => [f.kind, f.call, f.body.id])).toEqual([[FrameKind.Ack, 0, 777]]);
        const after: number[] = [];
        for (let m = await raw.receiveMessage(1000); m !== undefined; m = await raw.receiveMessage(1000)) {
          after.push(...m.frames.filter((f) => f.kind === FrameKind.Request).map((f) => f.call));
        }
        expect([...seen, ...after].length).toBeGreaterThan(seen.length);
      } finally {
        await client.close();
      }
    } finally {
      await raw.close();
    }
  });
});

describe("READY's window", () => {
  it('a server that widens the window in READY has the difference at once: the client sends past HELLO\'s window without credit', async () => {
    const raw = RawServer.listen();
    try {
      const admitting = raw.admit({ win: 65_536, wmax: 1 << 20 }, { win: 512 << 10 });
      const client = await Client.connect(raw.address, { livenessMs: 60_000 });
      await admitting;
      expect(raw.auth?.rwin).toBe(true);
      try {
        // 40 calls of 8 KiB inline arguments, one message each: about 360 KiB, past HELLO's
        // window (64 KiB, where 6 of them fit) and within READY's.
        for (let i = 0; i < 40; i += 1) {
          // Never answered: the client's close fails them.
          void client.unary(EchoDescriptor.methods.echo, { x: patterned(8192, i), tag: `c${i}` }, { mover: 'inline' }).catch(() => {});
          await new Promise((resolve) => setImmediate(resolve));
        }
        let bytes = raw.authBytes;
        const seen = new Set<number>();
        for (let m = await raw.receiveMessage(3000); m !== undefined && seen.size < 40; m = seen.size < 40 ? await raw.receiveMessage(3000) : undefined) {
          bytes += m.length;
          for (const f of m.frames) if (f.kind === FrameKind.Request) seen.add(f.call);
        }
        expect(seen.size).toBe(40);
        expect(bytes).toBeLessThanOrEqual(512 << 10);
      } finally {
        await client.close();
      }
    } finally {
      await raw.close();
    }
  });

  it.each([
    ['under HELLO\'s window', 32 << 10],
    ['over HELLO\'s `wmax`', (1 << 20) + 1],
  ])('a READY window %s fails the connect UNAVAILABLE', async (_what, win) => {
    const raw = RawServer.listen();
    try {
      const admitting = raw.admit({ win: 65_536, wmax: 1 << 20 }, { win }).catch(() => {});
      const failure = await Client.connect(raw.address, { connectTimeoutMs: 10_000 }).then(async (client) => { await client.close(); }, (error: unknown) => error);
      await admitting;
      expect(failure).toBeInstanceOf(GdrpcError);
      expect((failure as GdrpcError).code).toBe(Code.UNAVAILABLE);
      expect((failure as GdrpcError).message).toMatch(new RegExp(`announced a message window of ${win} bytes in READY \\(from HELLO's 65536 to its \`wmax\` 1048576\\)`));
    } finally {
      await raw.close();
    }
  });
});

/** A CREDIT on call 0 of `n` bytes with `id`, sent by `raw`: it took that much of the server's
 *  messages. */
function credit(raw: RawPeer, n: number, id: number): Promise<void> {
  return raw.sendMessage(packMessage([{ kind: FrameKind.Credit, call: 0, body: packCredit(n, id) }]));
}

function packCredit(n: number, id: number): Uint8Array {
  // {v: 2, n, id} as msgpack, written out: the test speaks the wire itself.
  const body = Buffer.alloc(3 + 2 + 5 + 2 + 5 + 3);
  let at = 0;
  body[at++] = 0x83;
  body.set([0xa1, 0x76, 0x02], at); at += 3;
  body.set([0xa1, 0x6e, 0xce], at); at += 3; body.writeUInt32BE(n, at); at += 4;
  body.set([0xa2, 0x69, 0x64, 0xce], at); at += 4; body.writeUInt32BE(id, at); at += 4;
  return body.subarray(0, at);
}
