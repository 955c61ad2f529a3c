// A peer that stops in the middle of a control message of many fragments. The server reads control
// messages through one receive, which UCX matches to the first control message it has from any
// peer; before the dispatcher gave up on a receive whose message does not come whole
// (core/rpc/runtime/dispatcher.ts #checkStalled), such a peer, unadmitted and holding no token,
// stopped a server reading any control message for good: its clients lost their connections and
// new ones got no handshake (a helper session's attack, 2026-12-06, 4 of 4 trials).
import { spawn } from 'node:child_process';
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
    const sender = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('./fixtures/partial-sender.ts', import.meta.url)), String(server.port)], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
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
      const stats = await serverStats(good);
      // The stopped peer's messages were cut off: the server gave up on at least one receive.
      expect(stats.dropped.partial).toBeGreaterThanOrEqual(1);
      console.log(`[partial-message] receives given up on: ${stats.dropped.partial}; unattributed messages: ${stats.dropped.messages}`);
    } finally {
      sender.kill('SIGKILL');
      await good.close();
    }
  });
});
