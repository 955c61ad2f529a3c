// Server events, with the server in this process and its client in another: connection on
// admission, disconnect when the client dies, error when admission fails.
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { Code, GdrpcError, Server, type UnaryHandler } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { disposePeers, spawnPeer } from '../support/peer.ts';

const clientMain = fileURLToPath(new URL('./fixtures/client-main.ts', import.meta.url));
const server = Server.create({ token: 'events-token' });
const unimplemented = (name: string): UnaryHandler => () => { throw new GdrpcError(Code.UNIMPLEMENTED, name); };
const handlers: Record<string, UnaryHandler> = Object.fromEntries(Object.keys(EchoDescriptor.methods).map((name) => [name, unimplemented(name)]));
handlers.sleep = (_args, ctx) => new Promise((resolve) => ctx.signal.addEventListener('abort', () => resolve({ aborted: true })));
server.register(EchoDescriptor, handlers);

afterAll(async () => {
  await disposePeers();
  await server.shutdown({ graceMs: 0 });
});

describe('server events', () => {
  it('connection, disconnect and error', async () => {
    const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
    const connections: string[] = [];
    const disconnects: string[] = [];
    const errors: GdrpcError[] = [];
    server.on('connection', ({ peer }) => connections.push(peer));
    const reasons: string[] = [];
    server.on('disconnect', ({ peer, reason }) => { disconnects.push(peer); reasons.push(reason.code); });
    server.on('error', (error) => errors.push(error));

    await using good = await spawnPeer(clientMain, { env: { GDRPC_TEST_CLIENT: JSON.stringify({ address: `127.0.0.1:${port}`, scenario: 'sleep', token: 'events-token' }) } });
    await expect.poll(() => server.activeCalls, { timeout: 5000 }).toBe(1);
    expect(connections).toHaveLength(1);
    good.kill();
    await expect.poll(() => disconnects, { timeout: 4000 }).toEqual(connections);
    expect(reasons).toEqual([Code.UNAVAILABLE]);  // the peer went away
    await expect.poll(() => server.activeCalls, { timeout: 4000 }).toBe(0);

    const bad = await spawnPeer(clientMain, { env: { GDRPC_TEST_CLIENT: JSON.stringify({ address: `127.0.0.1:${port}`, scenario: 'sleep', token: 'wrong' }) } }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(Error); // the client process fails to connect and exits
    await expect.poll(() => errors.map((e) => e.code), { timeout: 4000 }).toContain(Code.UNAUTHENTICATED);
    expect(connections).toHaveLength(1);
  });
});
