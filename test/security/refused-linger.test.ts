// A connection the server refuses (a wrong token, no message window, a malformed frame) is told
// why and then closed with force: closed gracefully, it waited for the peer to answer UCX's
// disconnect, and a peer that stopped itself never does. Its endpoint and sockets stayed open,
// no longer counted against the connection caps, for as long as the runtime lived: a helper
// session's stopped attacker held 2,000 descriptors of a server that way.
import { type ChildProcess } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { Runtime, Server } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { spawnStopping } from './fixtures/stopping.ts';
import { echoHandlers } from '../rpc/fixtures/in-process.ts';

const children: ChildProcess[] = [];
afterEach(() => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
});

describe('refused connections of a stopped peer', () => {
  it('are closed, their endpoints gone, while the peer stays stopped', async () => {
    const runtime = Runtime.create();
    try {
      const server = Server.create({ runtime }).register(EchoDescriptor, echoHandlers());
      const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
      const before = runtime.worker.stats().liveEndpoints;
      const count = 8;
      const stopper = spawnStopping('refused-stopper.ts', [port, count]);
      children.push(stopper.child);
      expect(await stopper.started).toBe(true);
      // Refused (no message window) and closed: each endpoint is gone though the peer never
      // answers (before, all 8 stayed).
      await expect.poll(() => runtime.worker.stats().liveEndpoints, { timeout: 15_000, interval: 100 }).toBe(before);
      expect(stopper.child.exitCode).toBe(null);  // still there, stopped
      await server.shutdown({ graceMs: 0 });
    } finally {
      await runtime.close();
    }
  }, 60_000);
});
