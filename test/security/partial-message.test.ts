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
