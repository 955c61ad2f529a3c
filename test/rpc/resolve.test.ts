// Host names a client dials are resolved off the JavaScript thread (core/rpc/connection/resolve.ts),
// within the connect timeout, and errors name the host as the caller wrote it.
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { Code } from '../../core/index.ts';
import { hostLookup, resolveHost } from '../../core/rpc/connection/resolve.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { TestClients } from './fixtures/clients.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';

const clients = new TestClients();
let server: ListeningPeer | undefined;
afterEach(async () => {
  vi.restoreAllMocks();
  await clients.closeAll();
});
afterAll(() => disposePeers());

describe('host names', () => {
  it('localhost resolves to its IPv4 address; addresses are taken as they are, without a lookup', async () => {
    await expect(hostLookup.ipv4('localhost')).resolves.toBe('127.0.0.1');
    const lookup = vi.spyOn(hostLookup, 'ipv4');
    await expect(resolveHost('10.1.2.3', 1000)).resolves.toBe('10.1.2.3');
    expect(lookup).not.toHaveBeenCalled();
  });

  it('a client dials a server by name, the name looked up once', async () => {
    server ??= await startServer();
    const lookup = vi.spyOn(hostLookup, 'ipv4');
    const client = await clients.connect(`localhost:${server.port}`);
    await expect(client.unary(EchoDescriptor.methods.ping, { n: 5 })).resolves.toMatchObject({ n: 5 });
    expect(lookup.mock.calls).toEqual([['localhost']]);
  });

  it('a name whose lookup does not answer fails the connect UNAVAILABLE within its timeout, and the event loop runs meanwhile', async () => {
    server ??= await startServer();
    vi.spyOn(hostLookup, 'ipv4').mockReturnValue(new Promise<string>(() => {}));
    let ticks = 0;
    const ticker = setInterval(() => { ticks += 1; }, 20);
    try {
      await expect(clients.connect(`slow.example:${server.port}`, { connectTimeoutMs: 600 })).rejects.toMatchObject({
        code: Code.UNAVAILABLE, message: expect.stringMatching(/no address for host slow\.example within 600 ms/),
      });
    } finally {
      clearInterval(ticker);
    }
    expect(ticks).toBeGreaterThan(0);
  });

  it('a name that does not resolve fails the connect INVALID_ARGUMENT, naming it', async () => {
    server ??= await startServer();
    vi.spyOn(hostLookup, 'ipv4').mockRejectedValue(Object.assign(new Error('getaddrinfo ENOTFOUND nowhere.example'), { code: 'ENOTFOUND' }));
    await expect(clients.connect(`nowhere.example:${server.port}`)).rejects.toMatchObject({
      code: Code.INVALID_ARGUMENT, message: expect.stringMatching(/cannot resolve host nowhere\.example: ENOTFOUND/),
    });
  });
});
