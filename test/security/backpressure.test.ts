// Backpressure against peers that take nothing (core/rpc/connection/room.ts): what a connection
// makes for its peer past its cap waits unmade, so a peer that asks for more than it takes costs
// the cap and its calls' own state, not the answers' bytes; it is still closed once its oldest
// message has waited its liveness time, and the calls that waited end with it. Before the room, a
// raw client asking 40 answers of 4 MB and crediting none had the server hold all 160 MB of them
// until its liveness ran out; a client's runtime held all its requests to a server that gave no
// credit.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pack } from 'msgpackr';
import { Client, Code, GdrpcError, Runtime, Tensor } from '../../core/index.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { packMessage } from '../../core/wire/message.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from '../rpc/fixtures/peers.ts';
import { RawPeer } from '../rpc/fixtures/raw-peer.ts';
import { RawServer } from '../rpc/fixtures/raw-server.ts';
import { serverStats } from '../rpc/fixtures/stats.ts';
import { disposePeers } from '../support/peer.ts';

const MiB = 1 << 20;
const BYTES = 4_000_000;
const CALLS = 40;
/** The connection's cap (backlog-watch.ts MAX_BLOCKED_BYTES, 32 MiB) and one more answer, with
 *  the 4 KiB each waiting frame counts. */
const CAP_AND_ONE = 32 * MiB + BYTES + 16 * 4096;
/** The server's liveness time: how long its oldest answer may wait for the peer. */
const LIVENESS_MS = 3000;

let server: ListeningPeer;
let good: Client;

beforeAll(async () => {
  server = await startServer({ livenessMs: LIVENESS_MS });
  good = await Client.connect(server.address);
});
afterAll(async () => {
  await good?.close();
  await disposePeers();
});

/** An admitted raw peer that takes nothing: a window of 64 KiB, and frames of up to 8 MiB on
 *  loans it never gives, so every answer larger than its window waits. */
async function takesNothing(port: number): Promise<RawPeer> {
  const raw = await RawPeer.connect(port);
  await raw.auth(undefined, undefined, { win: 64 * 1024, wmax: 16 * MiB, maxFrame: 16 * MiB });
  expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
  raw.keepsWindow = true;
  raw.keepAlive();
  return raw;
}

/** A server of its own whose runtime takes `maxWaitingBytes` (pressed from half of it), and a
 *  client watching it. */
async function pressedServer(maxWaitingBytes: number): Promise<{ watcher: Client; port: number }> {
  const pressed = await startServer({ livenessMs: LIVENESS_MS, runtimeOptions: { maxWaitingBytes } });
  return { watcher: await Client.connect(pressed.address), port: Number(pressed.address.split(':')[1]) };
}

/** Why a connection with calls waiting for room was closed (connection.ts). */
const CLOSED_WITH_CALLS_WAITING = /waiting for its window, the oldest for \d+ ms, with \d+ calls waiting to add to them/;

/** The server's calls in flight come back to the watcher's own (the calls that waited for room
 *  ended with their connection). */
async function callsComeBack(watcher: Client): Promise<void> {
  await expect.poll(async () => (await serverStats(watcher)).activeCalls, { timeout: 10_000, interval: 100 }).toBeLessThanOrEqual(1);
}

/** `count` calls of Echo.later answered at once with `bytes` each, from call id `first` on. */
async function askLater(raw: RawPeer, first: number, count: number, bytes = BYTES): Promise<void> {
  const body = pack({ v: 2, svc: EchoDescriptor.methods.later.service, m: 'later', a: { ms: 0, bytes } });
  for (let call = first; call < first + count; call += 8) {
    const calls = Math.min(8, first + count - call);
    await raw.sendMessage(packMessage(Array.from({ length: calls }, (_, i) => ({ kind: FrameKind.Request, call: call + i, body }))));
  }
}

describe('backpressure against a peer that takes nothing', () => {
  it(`a client asking ${CALLS} answers of ${BYTES} bytes and crediting none: the server makes messages of its cap alone, counts the answers waiting for room by what they hold, closes it after the liveness time, and its waiting calls end`, async () => {
    const raw = await takesNothing(Number(server.address.split(':')[1]));
    try {
      const { runs: before } = await serverStats(good);
      await askLater(raw, 1, CALLS);
      // Every handler ran (their answers made or waiting for room), and what waits for the peer
      // stays within the cap until the peer is closed.
      await expect.poll(async () => ((await serverStats(good)).runs.later ?? 0) - (before.later ?? 0), { timeout: 20_000, interval: 100 }).toBe(CALLS);
      let most = 0;
      let pings = 0;
      for (let stats = await serverStats(good); stats.connections > 1; stats = await serverStats(good)) {
        most = Math.max(most, stats.waiting);
        // Each answer counted once: as a message (the cap's) or waiting for room, never both.
        expect(stats.waiting).toBeLessThanOrEqual(CALLS * (BYTES + 4096) + 64 * 1024);
        expect((await good.unary(EchoDescriptor.methods.ping, { n: pings })).n).toBe(pings);
        pings += 1;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      // The answers that waited for room were counted (before, 34.4 MiB: the messages alone).
      expect(most).toBeGreaterThan(0.9 * CALLS * BYTES);
      const stats = await serverStats(good);
      expect(stats.disconnects.some((d) => /has left (\d+) bytes of messages \(\d+ frames\) waiting for its window, the oldest for \d+ ms/.exec(d) !== null && Number(/has left (\d+) bytes/.exec(d)![1]) <= CAP_AND_ONE)).toBe(true);
      // The calls that waited for room ended with the connection: only the watcher's own runs.
      await callsComeBack(good);
      console.log(`[backpressure] server counted at most ${(most / MiB).toFixed(1)} MiB for the peer; ${pings} pings served meanwhile`);
    } finally {
      await raw.close();
    }
  }, 60_000);

  it("peers each under the cap that take nothing, together past half of maxWaitingBytes: their calls waiting behind them do not keep them, they are closed after the liveness time, and the server's calls come back", async () => {
    // 48 MiB for the whole server: pressed from 24 MiB. A third peer holds six 4 MB answers and
    // asks nothing more (it stays, as any peer under the cap with no call waiting does); the two
    // others two each, 40 MB in all, under each one's 32 MiB cap and under the limit (answers
    // waiting for room count in it: past it they would be dropped). Before, the 20 calls each
    // asked for next waited in their rooms for ever and the peers were never closed (a helper
    // session's review: 16 such peers filled maxCalls, and every other caller was refused).
    const { watcher, port } = await pressedServer(48 * MiB);
    const presser = await takesNothing(port);
    const peers = [await takesNothing(port), await takesNothing(port)];
    try {
      await askLater(presser, 1, 6);
      for (const raw of peers) await askLater(raw, 1, 2);
      await expect.poll(async () => (await serverStats(watcher)).waiting, { timeout: 20_000, interval: 100 }).toBeGreaterThan(36 * MiB);
      // Small answers wait for room while the runtime is pressed; when one of the two is closed,
      // the presser's and the other's 32 MB keep it pressed.
      for (const raw of peers) await askLater(raw, 3, 20, 1000);
      // Both are closed once their oldest answer has waited the liveness time, with their calls.
      for (const raw of peers) expect(await raw.closedWithin(10 * LIVENESS_MS)).toBe('closed');
      const stats = await serverStats(watcher);
      expect(stats.disconnects.filter((d) => CLOSED_WITH_CALLS_WAITING.test(d))).toHaveLength(2);
      await callsComeBack(watcher);
      expect((await watcher.unary(EchoDescriptor.methods.ping, { n: 5 })).n).toBe(5);
    } finally {
      for (const raw of peers) await raw.close();
      await presser.close();
      await watcher.close();
    }
  }, 60_000);

  it('answers waiting for room past maxWaitingBytes are dropped, their calls ending RESOURCE_EXHAUSTED, long before the liveness time; the connection stays until then', async () => {
    // 48 MiB for the whole server, liveness 30 s. One peer asks 40 answers of 4 MB and credits
    // none: about 36 MB of messages wait for its window, and the other answers for room, counted
    // by what they hold. Before they counted, the server kept all 31 calls and their answers for
    // the liveness time, uncounted (8 such peers asking 128 echoes of 4 MB each took a server to
    // 3 GB of RSS in 10 s, scratch attack, 2026-12-07).
    const pressed = await startServer({ livenessMs: 30_000, runtimeOptions: { maxWaitingBytes: 48 * MiB } });
    const watcher = await Client.connect(pressed.address);
    const raw = await takesNothing(Number(pressed.address.split(':')[1]));
    try {
      await askLater(raw, 1, CALLS);
      await expect.poll(async () => ((await serverStats(watcher)).runs.later ?? 0), { timeout: 20_000, interval: 100 }).toBe(CALLS);
      // The dropped calls ended, well before the liveness time: what is left waiting fits the
      // limit with the messages (before: all 31, until the liveness time).
      await expect.poll(async () => (await serverStats(watcher)).activeCalls, { timeout: 10_000, interval: 100 }).toBeLessThanOrEqual(8);
      const stats = await serverStats(watcher);
      expect(stats.waiting).toBeLessThanOrEqual(48 * MiB);
      expect(await raw.closedWithin(0)).toBe('open');
      expect((await watcher.unary(EchoDescriptor.methods.ping, { n: 7 })).n).toBe(7);
    } finally {
      await raw.close();
      await watcher.close();
    }
  }, 60_000);

  it('a peer whose small answers begin to wait for room before any of them blocks is watched once they block, and closed', async () => {
    // 40 MiB for the whole server: pressed from 20 MiB. One peer keeps it pressed for good: six
    // 4 MB answers, under its cap, and no call of its own waiting (as before the room, it stays).
    // A second peer asks 200 pings at once and credits nothing: the first answer, posted in the
    // turn, makes its backlog non-empty, so the rest wait for room while nothing has blocked yet;
    // then, one a turn, they shut its 64 KiB window. Before, only a backlog past the cap started
    // the watch when a message blocked: the calls waited for ever (a helper session's review: 34
    // such peers held maxCalls for a minute, crediting nothing).
    const { watcher, port } = await pressedServer(40 * MiB);
    const presser = await takesNothing(port);
    const holder = await takesNothing(port);
    try {
      await askLater(presser, 1, 6);
      await expect.poll(async () => (await serverStats(watcher)).waiting, { timeout: 20_000, interval: 100 }).toBeGreaterThan(22 * MiB);
      // 200 pings in one message (200 KiB of window weight, within the server's opening window),
      // all read in one turn: all but the first wait for room before any answer has blocked, and
      // nothing else comes from this peer that would wait after.
      const ping = pack({ v: 2, svc: EchoDescriptor.methods.ping.service, m: 'ping', a: { n: 1 } });
      await holder.sendMessage(packMessage(Array.from({ length: 200 }, (_, i) => ({ kind: FrameKind.Request, call: 1 + i, body: ping }))));
      expect(await holder.closedWithin(10 * LIVENESS_MS)).toBe('closed');
      const stats = await serverStats(watcher);
      expect(stats.disconnects.some((d) => CLOSED_WITH_CALLS_WAITING.test(d))).toBe(true);
      await callsComeBack(watcher);
    } finally {
      await holder.close();
      await presser.close();
      await watcher.close();
    }
  }, 60_000);

  it(`a client's ${CALLS} requests of ${BYTES} bytes to a server that gives no credit: its runtime holds its cap, not ${CALLS * BYTES / 1e6} MB, and the calls end at their deadline`, async () => {
    const raw = RawServer.listen();
    const runtime = Runtime.create();
    try {
      const admitting = raw.admit({ win: 64 * 1024, wmax: 16 * MiB, maxFrame: 16 * MiB });
      const client = await Client.connect(raw.address, { runtime, livenessMs: 60_000 });
      await admitting;
      try {
        const tag = 't'.repeat(BYTES);
        let settled = false;
        const calls = Promise.all(Array.from({ length: CALLS }, () => client.unary(EchoDescriptor.methods.echo, { x: Tensor.zeros([0], 'u8'), tag }, { deadline: 3000 }).catch((e: unknown) => e)));
        void calls.finally(() => { settled = true; });
        let most = 0;
        while (!settled) {
          most = Math.max(most, runtime.waitingBytes);
          expect(runtime.waitingBytes).toBeLessThanOrEqual(CAP_AND_ONE);
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        expect(most).toBeGreaterThan(24 * MiB);
        const outcomes = await calls;
        expect(outcomes.map((o) => (o instanceof GdrpcError ? o.code : o))).toEqual(Array(CALLS).fill(Code.DEADLINE_EXCEEDED));
      } finally {
        await client.close();
      }
    } finally {
      await runtime.close();
      await raw.close();
    }
  }, 60_000);
});
