// Graceful shutdown: calls in flight finish, new calls are refused, the process exits; calls that
// outlast the grace period are aborted with UNAVAILABLE.
import { afterEach, describe, expect, it } from 'vitest';
import { Client, Code } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { codeOf } from './fixtures/stats.ts';

const clients: Client[] = [];
afterEach(async () => {
  await Promise.all(clients.splice(0).map((client) => client.close()));
  await disposePeers();
});

describe('shutdown', () => {
  it('drains calls in flight, refuses new ones, then exits', async () => {
    await using server = await startServer();
    const client = await Client.connect(server.address);
    clients.push(client);
    const inFlight = [client.unary(EchoDescriptor.methods.sleep, { ms: 800 }), client.unary(EchoDescriptor.methods.sleep, { ms: 600 })];
    await new Promise((resolve) => setTimeout(resolve, 150));
    const started = Date.now();
    server.send('shutdown 10000');
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await codeOf(client.unary(EchoDescriptor.methods.ping, { n: 1 }))).toBe(Code.UNAVAILABLE);
    const results = await Promise.all(inFlight);
    expect(results.map((r) => r.aborted)).toEqual([false, false]);
    await server.waitFor(/SHUTDOWN/, 5000);
    expect((await server.exited).code).toBe(0);
    // Exited once drained, long before the 10 s grace.
    expect(Date.now() - started).toBeLessThan(6000);
  });

  it('aborts calls that outlast the grace period with UNAVAILABLE', async () => {
    await using server = await startServer();
    const client = await Client.connect(server.address);
    clients.push(client);
    const call = client.unary(EchoDescriptor.methods.sleep, { ms: 30_000 });
    await new Promise((resolve) => setTimeout(resolve, 150));
    server.send('shutdown 300');
    expect(await codeOf(call)).toBe(Code.UNAVAILABLE);
    expect((await server.exited).code).toBe(0);
  });
});
