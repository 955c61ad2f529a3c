// A peer that stops in the middle of a control message of many fragments. The server reads control
// messages through one receive, which UCX matches to the first control message it has from any
// peer; before the dispatcher gave up on a receive whose message does not come whole
// (core/rpc/runtime/dispatcher.ts #checkStalled), such a peer, unadmitted and holding no token,
// stopped a server reading any control message for good: its clients lost their connections and
// new ones got no handshake (a helper session's attack, 2026-12-06, 4 of 4 trials).
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { Client } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer } from '../rpc/fixtures/peers.ts';
import { serverStats } from '../rpc/fixtures/stats.ts';
import { disposePeers } from '../support/peer.ts';

afterAll(async () => { await disposePeers(); });

describe('a peer that stops mid-message', () => {
  it('costs the server about a second of control messages, not all of them: clients keep their calls, new ones connect', async () => {
    const server = await startServer({ token: 'partial-token' });
    const good = await Client.connect(server.address, { token: 'partial-token' });
    const senders: ChildProcess[] = [];
    try {
      // Where the sender stops is up to its scheduler: one that stopped before any byte left, or
      // between two whole messages, cut nothing off. It tries again (ten tries at most), a new peer each time, until
      // the server has given up on a receive; every try, calls go on.
      let stats = await serverStats(good);
      for (let attempt = 1; attempt <= 10 && stats.dropped.partial === 0; attempt += 1) {
        const sender = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('./fixtures/partial-sender.ts', import.meta.url)), String(server.port)], { stdio: ['ignore', 'pipe', 'inherit'] });
        senders.push(sender);
        const started = await new Promise<boolean>((resolve) => {
          createInterface({ input: sender.stdout! }).on('line', (line) => { if (line === 'STARTED') resolve(true); });
          sender.once('exit', () => resolve(false));
        });
        expect(started).toBe(true);
        // Calls go on, the first perhaps a second late (the receive given up on).
        for (let n = 0; n < 20; n += 1) expect((await good.unary(EchoDescriptor.methods.ping, { n }, { deadline: 30_000 })).n).toBe(n);
        const fresh = await Client.connect(server.address, { token: 'partial-token' });
        expect((await fresh.unary(EchoDescriptor.methods.ping, { n: 5 }, { deadline: 30_000 })).n).toBe(5);
        await fresh.close();
        stats = await serverStats(good);
        console.log(`[partial-message] try ${attempt}: receives given up on: ${stats.dropped.partial}; unattributed messages: ${stats.dropped.messages}`);
      }
      // A stopped peer's message was cut off: the server gave up on a receive, and served on.
      expect(stats.dropped.partial).toBeGreaterThanOrEqual(1);
    } finally {
      for (const sender of senders) sender.kill('SIGKILL');
      await good.close();
    }
  }, 180_000);
});

describe('a peer that sends rendezvous messages and stops', () => {
  // A rendezvous message's bytes stay with its sender until the receiver asks: a receive of one
  // whose sender stopped waits for good. Before receives in turns waited alone, one admitted peer
  // that sent 200 small KEEPALIVEs so and stopped its process held every peer's control messages
  // a second each: no client's call was answered for as long as the test ran, and no handshake
  // completed (a helper session's attack, 2026-12-06).
  it('holds nobody up for long: a client is served throughout, the peer is closed and what it queued is dropped unread', async () => {
    const server = await startServer({ livenessMs: 3000 });
    const good = await Client.connect(server.address);
    const stopper = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('./fixtures/rendezvous-stopper.ts', import.meta.url)), String(server.port), '200', '5'], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      const started = await new Promise<boolean>((resolve) => {
        createInterface({ input: stopper.stdout! }).on('line', (line) => { if (line === 'STARTED') resolve(true); });
        stopper.once('exit', () => resolve(false));
      });
      expect(started).toBe(true);
      // Calls go on (one may wait about a second, should a receive of any control message have
      // taken one of the stopped peer's: that receive is given up on as above), until the peer
      // is closed and its messages dropped; a new client connects.
      const slowest = { ms: 0 };
      const pinging = (async () => {
        for (let n = 0; n < 40; n += 1) {
          const sent = performance.now();
          expect((await good.unary(EchoDescriptor.methods.ping, { n }, { deadline: 10_000 })).n).toBe(n);
          slowest.ms = Math.max(slowest.ms, performance.now() - sent);
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      })();
      // Closed for the message that does not come whole; or, where every message of its that the
      // server had not received yet was taken by a receive of any tag (given up on, above), for
      // silence (a loaded machine can let it send most of them before it stops).
      const stall = /did not arrive whole within 1000 ms: the connection is closed rather than read past it/;
      await expect.poll(async () => (await serverStats(good)).disconnects.filter((e) => stall.test(e) || /silent/.test(e)), { timeout: 30_000, interval: 200 }).toHaveLength(1);
      await pinging;
      const fresh = await Client.connect(server.address);
      expect((await fresh.unary(EchoDescriptor.methods.ping, { n: 5 })).n).toBe(5);
      await fresh.close();
      const stats = await serverStats(good);
      const stalled = stats.disconnects.some((e) => stall.test(e));
      console.log(`[rendezvous-stopper] slowest of 40 pings ${slowest.ms.toFixed(0)} ms; closed ${stalled ? 'for its stuck message' : 'for silence'}; receives given up on ${stats.dropped.partial}, messages dropped unread ${stats.dropped.messages}`);
      // What it left queued behind a stuck message is dropped unread once it is closed for it.
      if (stalled) expect(stats.dropped.messages).toBeGreaterThan(0);
    } finally {
      stopper.kill('SIGKILL');
      await good.close();
    }
  }, 120_000);
});

