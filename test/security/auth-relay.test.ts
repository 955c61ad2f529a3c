// A peer that can send messages to a client (a server it dialled, an owner it pulls from) forges
// the HELLO of the client's next connection with the key and challenge of its own, unadmitted
// connection to a server that wants a token: the client's proof, bound to the client's address,
// does not admit the forger's connection (docs/security.md "The proof").
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Client, Code, GdrpcError, Runtime, Server, type UnaryHandler } from '../../core/index.ts';
import { Endpoint } from '../../core/ucx/index.ts';
import { Connection } from '../../core/rpc/connection/connection.ts';
import { controlPrefix } from '../../core/wire/tag.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { RawServer, sendHello } from '../rpc/fixtures/raw-server.ts';
import { RawPeer } from '../rpc/fixtures/raw-peer.ts';

const closing: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  vi.restoreAllMocks();
  for (const close of closing.splice(0).reverse()) await close();
});

/** A server on a runtime of its own with token 'secret' (and `options`), serving Echo.ping alone
 *  (the pings it ran in `ran`, its 'error' events in `errors`); closed after the test. */
async function tokenServer(options: { requireClientAddress?: boolean } = {}): Promise<{ serving: Runtime; port: number; ran: number[]; errors: GdrpcError[] }> {
  const serving = Runtime.create();
  const ran: number[] = [];
  const errors: GdrpcError[] = [];
  const unimplemented = (name: string): UnaryHandler => () => { throw new GdrpcError(Code.UNIMPLEMENTED, name); };
  const handlers: Record<string, UnaryHandler> = Object.fromEntries(Object.keys(EchoDescriptor.methods).map((name) => [name, unimplemented(name)]));
  handlers.ping = (args: { n: number }) => { ran.push(args.n); return { n: args.n }; };
  const server = Server.create({ runtime: serving, token: 'secret', ...options }).register(EchoDescriptor, handlers);
  server.on('error', (error) => errors.push(error));
  const { port } = await server.listen({ host: '127.0.0.1' });
  closing.push(() => serving.close(), () => server.shutdown({ graceMs: 0 }));
  return { serving, port, ran, errors };
}

describe('a forged HELLO', () => {
  it('carrying the key and challenge of the forger\'s own connection: the client\'s proof does not admit that connection', async () => {
    const { serving, port, ran, errors } = await tokenServer();
    // The forger's own connection to that server: its key and challenge, no token.
    const forger = await RawPeer.connect(port);
    closing.push(() => forger.close());
    // The victim's connection to a server the forger runs: a way to send to the victim's worker.
    const calling = Runtime.create();
    closing.push(() => calling.close());
    const hostile = RawServer.listen();
    closing.push(() => hostile.close());
    void Client.connect(hostile.address, { runtime: calling, connectTimeoutMs: 4000 }).catch(() => {});
    const toVictim = await hostile.accepted();
    // The forged HELLO comes as the victim dials the server, naming the victim's port (read here;
    // an attacker guesses it).
    const real = Endpoint.prototype.localAddress;
    let forged = false;
    let victimAddress: string | undefined;
    // The forged HELLO comes first: the server's own HELLO to the victim is held back 500 ms (on
    // a network, whichever comes first is the forger's luck; here it must be its).
    const sendRaw = Connection.prototype.sendRaw;
    vi.spyOn(Connection.prototype, 'sendRaw').mockImplementation(function (this: Connection, tag: bigint, bytes: Uint8Array) {
      if (this.runtime !== serving || this.peer !== victimAddress || controlPrefix(Number(tag >> 32n)) !== 0) return sendRaw.call(this, tag, bytes);
      return new Promise<void>((resolve, reject) => setTimeout(() => sendRaw.call(this, tag, bytes).then(resolve, reject), 500));
    });
    vi.spyOn(Endpoint.prototype, 'localAddress').mockImplementation(function (this: Endpoint) {
      const address = real.call(this);
      if (!forged && address !== undefined && this.peer === `127.0.0.1:${port}`) {
        forged = true;
        victimAddress = address;
        const cp = Number(address.slice(address.lastIndexOf(':') + 1));
        const body = { v: 2, key: forger.serverKey, chal: forger.hello!.chal, maxFrame: 1 << 20, maxTensor: 1 << 20, inline: 4096, live: 60_000, gpu: false, win: 8 << 20, cp };
        void sendHello(toVictim, body);
      }
      return address;
    });
    const victim = Client.connect(`127.0.0.1:${port}`, { runtime: calling, token: 'secret', connectTimeoutMs: 3000 }).then(
      (client) => { closing.push(() => client.close()); return 'connected'; }, (error: GdrpcError) => error.code);
    // The server refuses the forger's connection: the proof names the victim's address.
    const answer = await forger.receive(5000);
    expect(forged).toBe(true);
    expect(answer?.kind).toBe(FrameKind.Error);
    expect(answer?.body).toMatchObject({ code: Code.UNAUTHENTICATED, msg: expect.stringMatching(/the proof names client 127\.0\.0\.1:\d+, and this connection comes from 127\.0\.0\.1:\d+/) });
    await forger.sendBody(FrameKind.Request, 1, { svc: EchoDescriptor.name, m: 'ping', a: { n: 42 } }).catch(() => {});
    expect(await victim).toBe(Code.UNAVAILABLE);
    expect(ran).toEqual([]);
    expect(errors.map((e) => e.code)).toContain(Code.UNAUTHENTICATED);
  });
});

describe('the key-0 copy of HELLO', () => {
  it('never reaches a connection made in turns to a hostile server: it would learn another connection\'s key', async () => {
    // A server sends HELLO under key 0 and under the key of the client's port. A connection made
    // in turns (its UCX did not tell its address) to a server that never answers holds the turn;
    // it took the key-0 copy of an honest server's HELLO to another connection, and sent its AUTH,
    // with that connection's server key, to the hostile server, which could then send calls
    // under that key (a helper session's review, 2026-12-06).
    const { port } = await tokenServer();
    const hostile = RawServer.listen();
    closing.push(() => hostile.close());
    const calling = Runtime.create();
    closing.push(() => calling.close());
    const real = Endpoint.prototype.localAddress;
    vi.spyOn(Endpoint.prototype, 'localAddress').mockImplementation(function (this: Endpoint) {
      return this.peer === hostile.address ? undefined : real.call(this);
    });
    const inTurns = Client.connect(hostile.address, { runtime: calling, connectTimeoutMs: 4000 }).then(() => 'connected', (error: GdrpcError) => error.code);
    await hostile.accepted();
    const honest = await Client.connect(`127.0.0.1:${port}`, { runtime: calling, token: 'secret' });
    closing.push(() => honest.close());
    await expect(honest.unary(EchoDescriptor.methods.ping, { n: 3 })).resolves.toMatchObject({ n: 3 });
    // Nothing reached the hostile server: no AUTH, no key.
    expect(await hostile.receiveMessage(1500)).toBeUndefined();
    expect(await inTurns).toBe(Code.UNAVAILABLE);
  });
});

describe('ServerOptions.requireClientAddress', () => {
  it('refuses a valid proof that names no client address, and admits one that does', async () => {
    const { port } = await tokenServer({ requireClientAddress: true });
    // A proof of the token without `ca` (what a client whose UCX does not tell its address sends).
    const unbound = await RawPeer.connect(port);
    closing.push(() => unbound.close());
    await unbound.auth('secret');
    const answer = await unbound.receive(5000);
    expect(answer?.kind).toBe(FrameKind.Error);
    expect(answer?.body).toMatchObject({ code: Code.UNAUTHENTICATED, msg: expect.stringMatching(/requires a proof bound to the client's address/) });
    const client = await Client.connect(`127.0.0.1:${port}`, { token: 'secret' });
    closing.push(() => client.close());
    await expect(client.unary(EchoDescriptor.methods.ping, { n: 2 })).resolves.toMatchObject({ n: 2 });
  });

  it('is refused as an option that is not a boolean, or without a token', () => {
    expect(() => Server.create({ token: 'secret', requireClientAddress: 'yes' as unknown as boolean })).toThrow(expect.objectContaining({ code: Code.INVALID_ARGUMENT }));
    expect(() => Server.create({ requireClientAddress: true })).toThrow(expect.objectContaining({ code: Code.INVALID_ARGUMENT, message: expect.stringMatching(/give `token` too/) }));
  });
});
