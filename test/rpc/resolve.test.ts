// Host names a client dials are resolved off the JavaScript thread (core/rpc/connection/resolve.ts),
// within the connect timeout, and errors name the host as the caller wrote it.
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { Code } from '../../core/index.ts';
import { hostLookup, LOOKUPS_AT_ONCE, resolveHost } from '../../core/rpc/connection/resolve.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { TestClients } from './fixtures/clients.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';

const clients = new TestClients();
let server: ListeningPeer | undefined;
/** Lookups that never answer until the test ends: each holds a lookup's place until then. */
const hanging: Array<(error: Error) => void> = [];
const hang = (): Promise<string> => new Promise<string>((_, reject) => hanging.push(reject));
afterEach(async () => {
  for (const reject of hanging.splice(0)) reject(Object.assign(new Error('timed out'), { code: 'ETIMEOUT' }));
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
    vi.spyOn(hostLookup, 'ipv4').mockImplementation(hang);
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

  it(`${LOOKUPS_AT_ONCE} lookups run at once, the rest wait their turn within their own timeouts; a name server that fails is UNAVAILABLE`, async () => {
    const answers: Array<(address: string) => void> = [];
    const lookup = vi.spyOn(hostLookup, 'ipv4').mockImplementation(() => new Promise<string>((resolve) => answers.push(resolve)));
    const waiting = Array.from({ length: LOOKUPS_AT_ONCE + 2 }, (_, i) => resolveHost(`host${i}.example`, 5000));
    await expect.poll(() => lookup.mock.calls.length).toBe(LOOKUPS_AT_ONCE);
    // One that times out while waiting its turn gives its place up.
    await expect(resolveHost('late.example', 50)).rejects.toMatchObject({ code: Code.UNAVAILABLE });
    for (let i = 0; i < LOOKUPS_AT_ONCE + 2; i++) {
      await expect.poll(() => answers.length).toBeGreaterThan(i);
      answers[i]!(`10.0.0.${i}`);
    }
    expect(await Promise.all(waiting)).toEqual(['10.0.0.0', '10.0.0.1', '10.0.0.2', '10.0.0.3']);
    expect(lookup.mock.calls.map(([host]) => host)).toEqual(['host0.example', 'host1.example', 'host2.example', 'host3.example']);
    lookup.mockRejectedValue(Object.assign(new Error('queryA ESERVFAIL'), { code: 'ESERVFAIL' }));
    await expect(resolveHost('failing.example', 1000)).rejects.toMatchObject({ code: Code.UNAVAILABLE, message: expect.stringMatching(/cannot resolve host failing\.example: ESERVFAIL/) });
  });

  it('a lookup waiting for its name servers ends with the caller\'s signal: CANCELLED', async () => {
    vi.spyOn(hostLookup, 'ipv4').mockImplementation(hang);
    await expect(resolveHost('slow.example', 10_000, AbortSignal.timeout(50))).rejects.toMatchObject({ code: Code.CANCELLED });
    // Given up already: no lookup starts.
    const lookup = vi.spyOn(hostLookup, 'ipv4');
    lookup.mockClear();
    await expect(resolveHost('slow.example', 10_000, AbortSignal.abort())).rejects.toMatchObject({ code: Code.CANCELLED });
    expect(lookup).not.toHaveBeenCalled();
  });

  it('a name that does not resolve fails the connect INVALID_ARGUMENT, naming it', async () => {
    server ??= await startServer();
    vi.spyOn(hostLookup, 'ipv4').mockRejectedValue(Object.assign(new Error('getaddrinfo ENOTFOUND nowhere.example'), { code: 'ENOTFOUND' }));
    await expect(clients.connect(`nowhere.example:${server.port}`)).rejects.toMatchObject({
      code: Code.INVALID_ARGUMENT, message: expect.stringMatching(/cannot resolve host nowhere\.example: ENOTFOUND/),
    });
  });
});
