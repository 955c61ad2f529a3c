// An endpoint connected to a listener of its own worker (a process calling a server of its own
// runtime): UCX 1.22 left the TCP lanes of such an endpoint open after a graceful close, 3 sockets
// a connection until the worker closed (found by a helper session using the package; a process
// that called its own server every few seconds would have run out of descriptors). Endpoint.close
// flushes such an endpoint and closes it with force.
import { readdirSync, readlinkSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { Client, Code, GdrpcError, Runtime, Server, type UnaryHandler } from '../../core/index.ts';
import { Endpoint, Listener, Worker } from '../../core/ucx/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { EXACT, localSide, TRANSPORTS } from './local.ts';

/** This process's open sockets. */
function sockets(): number {
  return readdirSync('/proc/self/fd').filter((fd) => {
    try {
      return readlinkSync(`/proc/self/fd/${fd}`).startsWith('socket:');
    } catch {
      return false;  // the listing's own descriptor, gone by now
    }
  }).length;
}

const CYCLES = 20;

describe('an endpoint connected to its own worker', () => {
  const { worker } = localSide(TRANSPORTS.tcp);
  const other = localSide(TRANSPORTS.tcp).worker;

  it.each([
    ['its own worker', () => worker],
    ['another worker of the process (which never kept them)', () => other],
  ])(`${CYCLES} graceful closes of endpoints to a listener of %s leave no socket behind`, async (_, client: () => Worker) => {
    const listener = Listener.create(worker, { host: '127.0.0.1', port: 0 });
    const accepted: Endpoint[] = [];
    listener.on('connection', (endpoint) => accepted.push(endpoint));
    try {
      const cycle = async (): Promise<void> => {
        const endpoint = Endpoint.connect(client(), { host: '127.0.0.1', port: listener.port });
        const into = new Uint8Array(8);
        const received = worker.tagRecv(into, 7n, EXACT);
        await endpoint.tagSend(7n, Uint8Array.from([1, 2, 3, 4, 5, 6, 7, 8]));
        await received;
        expect([...into]).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
        while (accepted.length === 0) await new Promise((resolve) => setTimeout(resolve, 1));
        // The connecting side first, gracefully: the order that left the sockets.
        await endpoint.close();
        await accepted.shift()!.close();
      };
      await cycle();  // the lanes a worker keeps for good are made by the first
      const before = sockets();
      for (let i = 0; i < CYCLES; i += 1) await cycle();
      // 3 x CYCLES more before the change; a socket or two may still be closing.
      await expect.poll(sockets, { timeout: 5000, interval: 50 }).toBeLessThanOrEqual(before);
    } finally {
      listener.close();
    }
  });
});

describe('an endpoint connected to its own worker, closed in other orders (a review found two that leaked)', () => {
  const { worker } = localSide(TRANSPORTS.tcp);

  it.each(['the accepted endpoint closing first', 'the listener closed first'])(`${CYCLES} cycles with %s leave no socket behind`, async (order) => {
    const cycle = async (): Promise<void> => {
      const listener = Listener.create(worker, { host: '127.0.0.1', port: 0 });
      const accepted: Endpoint[] = [];
      listener.on('connection', (endpoint) => accepted.push(endpoint));
      try {
        const endpoint = Endpoint.connect(worker, { host: '127.0.0.1', port: listener.port });
        await endpoint.flush();
        while (accepted.length === 0) await new Promise((resolve) => setTimeout(resolve, 1));
        if (order === 'the listener closed first') {
          listener.close();
          await endpoint.close();
          await accepted[0]!.close();
        } else {
          const serverSide = accepted[0]!.close();  // started, not awaited
          await endpoint.close();
          await serverSide;
        }
      } finally {
        listener.close();
      }
    };
    await cycle();
    const before = sockets();
    for (let i = 0; i < CYCLES; i += 1) await cycle();
    await expect.poll(sockets, { timeout: 5000, interval: 50 }).toBeLessThanOrEqual(before);
  });
});

describe('which endpoint is connected to its own worker', () => {
  const { worker } = localSide(TRANSPORTS.tcp);
  const other = localSide(TRANSPORTS.tcp).worker;

  it('one whose connection a listener of its worker accepted, not one that only shares a port with one (a review found the port taken for proof)', async () => {
    const theirs = Listener.create(other, { host: '127.0.0.1', port: 0 });
    const accepted: Endpoint[] = [];
    theirs.on('connection', (endpoint) => accepted.push(endpoint));
    const toOther = Endpoint.connect(worker, { host: '127.0.0.1', port: theirs.port });
    await toOther.flush();
    while (accepted.length === 0) await new Promise((resolve) => setTimeout(resolve, 1));
    // The other worker stops listening; this one listens on all addresses at that port.
    theirs.close();
    const mine = Listener.create(worker, { host: '0.0.0.0', port: theirs.port });
    const mineAccepted: Endpoint[] = [];
    mine.on('connection', (endpoint) => mineAccepted.push(endpoint));
    try {
      expect(Worker.acceptedPeers(worker).has(toOther.localAddress()!)).toBe(false);
      const toSelf = Endpoint.connect(worker, { host: '127.0.0.1', port: mine.port });
      await toSelf.flush();
      while (mineAccepted.length === 0) await new Promise((resolve) => setTimeout(resolve, 1));
      const selfAddress = toSelf.localAddress()!;
      expect(Worker.acceptedPeers(worker).has(selfAddress)).toBe(true);
      await toSelf.close();
      await mineAccepted[0]!.close();
      // Accepted and closed: no longer its.
      expect(Worker.acceptedPeers(worker).has(selfAddress)).toBe(false);
    } finally {
      await toOther.close();
      for (const endpoint of accepted) await endpoint.close();
      mine.close();
    }
  });
});

describe('a client of a server on its own runtime', () => {
  const runtime = Runtime.create();
  afterAll(() => runtime.close());

  it.each(['127.0.0.1', '0.0.0.0'])(`${CYCLES} connections to a server listening on %s, each closed after a call, leave no socket behind`, async (host) => {
    const handlers: Record<string, UnaryHandler> = Object.fromEntries(Object.keys(EchoDescriptor.methods).map((name) => [name, (() => { throw new GdrpcError(Code.UNIMPLEMENTED, name); }) as UnaryHandler]));
    handlers.ping = ((args: { n: number }) => ({ n: args.n })) as UnaryHandler;
    const server = Server.create({ runtime }).register(EchoDescriptor, handlers);
    try {
      const { port } = await server.listen({ host, port: 0 });
      const cycle = async (n: number): Promise<void> => {
        const client = await Client.connect({ host: '127.0.0.1', port }, { runtime });
        expect((await client.unary(EchoDescriptor.methods.ping, { n })).n).toBe(n);
        await client.close();
      };
      await cycle(0);
      const before = sockets();
      for (let i = 1; i <= CYCLES; i += 1) await cycle(i);
      await expect.poll(() => server.connectionCount, { timeout: 5000 }).toBe(0);
      await expect.poll(sockets, { timeout: 5000, interval: 50 }).toBeLessThanOrEqual(before);
    } finally {
      await server.shutdown({ graceMs: 0 });
    }
  });
});
