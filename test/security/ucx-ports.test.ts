// UCX's own TCP ports. Every UCX worker with the tcp transport listens on a port of each network
// device it uses (loopback and the network alike, whatever address a Server listens on), and UCX
// reads what a peer connecting there sends before gdrpc sees a byte: one hand-written wireup
// message carrying a worker address of version 3 aborts a gdrpc server (test/support/raw-iface.ts,
// SIGABRT in UCX 1.22's address.c). RuntimeOptions.allowedPeers (GDRPC_ALLOWED_PEERS) puts a
// socket filter on those ports and on the listeners: a source outside the list never completes a
// TCP handshake, so nothing it sends reaches UCX. Peers here connect from other loopback
// addresses (127.0.0.2, 127.0.0.3) to stand for other hosts.
import { connect as tcpConnect } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Client, Runtime, Server } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from '../rpc/fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { listeningSockets, sendCraftedWireup } from '../support/raw-iface.ts';

const linux = process.platform === 'linux';

/** Whether a plain TCP connection from `localAddress` to `port` completes within `ms`. */
function tcpConnects(port: number, localAddress: string, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = tcpConnect({ host: '127.0.0.1', port, localAddress });
    const timer = setTimeout(() => { socket.destroy(); resolve(false); }, ms);
    socket.on('connect', () => { clearTimeout(timer); socket.destroy(); resolve(true); });
    socket.on('error', () => { clearTimeout(timer); resolve(false); });
  });
}

/** The UCX transport ports of a server process on loopback: its listening sockets other than the listener. */
function transportPorts(peer: ListeningPeer): number[] {
  return listeningSockets(peer.child.pid!).filter((s) => s.address === '127.0.0.1' && s.port !== peer.port).map((s) => s.port);
}

async function pingOnce(address: string, options: { connectTimeoutMs?: number } = {}): Promise<number> {
  const client = await Client.connect(address, options);
  try {
    return (await client.unary(EchoDescriptor.methods.ping, { n: 7 })).n as number;
  } finally {
    await client.close();
  }
}

describe.runIf(linux)('a server whose peers are 127.0.0.1 only (GDRPC_ALLOWED_PEERS)', () => {
  let server: ListeningPeer;
  beforeAll(async () => {
    server = await startServer({}, { GDRPC_ALLOWED_PEERS: '127.0.0.1' });
  });
  afterAll(disposePeers);

  it('a raw peer from another address never reaches its UCX ports: the crafted wireup that aborts an unguarded server is never delivered', async () => {
    const ports = transportPorts(server);
    expect(ports.length).toBeGreaterThan(0);
    for (const port of ports) {
      const result = await sendCraftedWireup({ host: '127.0.0.1', port, localAddress: '127.0.0.3', connectTimeoutMs: 1000 });
      expect(result.connected).toBe(false);
    }
    // Nor the listener's port.
    expect(await tcpConnects(server.port, '127.0.0.3', 1000)).toBe(false);
    expect(server.child.exitCode).toBeNull();
    expect(server.child.signalCode).toBeNull();
    expect(await pingOnce(server.address)).toBe(7);
  });

  it('a well-behaved client from 127.0.0.1 is served, its transports connected both ways', async () => {
    expect(await pingOnce(server.address)).toBe(7);
    expect(await pingOnce(server.address)).toBe(7);
  });
});

describe.runIf(linux)('a server whose peers are 127.0.0.2 only', () => {
  let server: ListeningPeer;
  beforeAll(async () => {
    server = await startServer({}, { GDRPC_ALLOWED_PEERS: '127.0.0.2/32' });
  });
  afterAll(disposePeers);

  it('refuses a client connecting from 127.0.0.1 (its handshake never completes) and admits TCP from 127.0.0.2', async () => {
    await expect(pingOnce(server.address, { connectTimeoutMs: 1500 })).rejects.toThrow(/UNAVAILABLE.*no handshake/);
    // The filter keeps what it should: the allowed source's handshake completes.
    expect(await tcpConnects(server.port, '127.0.0.2', 10_000)).toBe(true);
    for (const port of transportPorts(server)) expect(await tcpConnects(port, '127.0.0.2', 10_000)).toBe(true);
    expect(await tcpConnects(server.port, '127.0.0.1', 1000)).toBe(false);
  });
});

describe.runIf(linux)('RuntimeOptions.allowedPeers and networkDevices', () => {
  const runtimes: Runtime[] = [];
  const open = (options: Parameters<typeof Runtime.create>[0]): Runtime => {
    const runtime = Runtime.create(options);
    runtimes.push(runtime);
    return runtime;
  };
  afterEach(async () => {
    for (const runtime of runtimes.splice(0)) await runtime.close();
  });

  it('guards every transport port and every listener of the runtime; ports() says so', async () => {
    const runtime = open({ allowedPeers: ['127.0.0.1', '::1'] });
    const server = Server.create({ runtime });
    // ping answers; the other methods are not called here.
    server.register(EchoDescriptor, Object.fromEntries(Object.keys(EchoDescriptor.methods).map((name) => [name, (args: { n: number }) => ({ n: args.n })])) as never);
    const address = await server.listen({ host: '127.0.0.1', port: 0 });
    try {
      const ports = runtime.ports();
      expect(ports.filter((p) => p.kind === 'transport').length).toBeGreaterThan(0);
      expect(ports.find((p) => p.kind === 'listener')).toMatchObject({ port: address.port, guarded: true });
      expect(ports.every((p) => p.guarded)).toBe(true);
      // A client on a runtime of its own, guarded alike, is served (transports connect both ways).
      const clientRuntime = open({ allowedPeers: ['127.0.0.1'] });
      const client = await Client.connect(address, { runtime: clientRuntime });
      expect((await client.unary(EchoDescriptor.methods.ping, { n: 3 })).n).toBe(3);
      await client.close();
    } finally {
      await server.shutdown();
    }
  });

  it('an unguarded runtime says its ports are open', () => {
    expect(open({}).ports().every((p) => !p.guarded)).toBe(true);
  });

  it('prefixes are masked: 127.0.0.0/8 admits 127.0.0.3, ::1 alone admits no IPv4 source', async () => {
    const wide = open({ allowedPeers: ['127.0.0.0/8'] });
    const v6only = open({ allowedPeers: ['::1'] });
    const port = (runtime: Runtime): number => runtime.ports().find((p) => p.address === '127.0.0.1')!.port;
    expect(await tcpConnects(port(wide), '127.0.0.3', 10_000)).toBe(true);
    expect(await tcpConnects(port(v6only), '127.0.0.1', 1000)).toBe(false);
  });

  it('networkDevices ["lo"] keeps UCX\'s transports off every other device', () => {
    const ports = open({ networkDevices: ['lo'] }).ports();
    expect(ports.length).toBeGreaterThan(0);
    for (const p of ports) expect(['127.0.0.1', '::1']).toContain(p.address);
  });

  it.each([[['10.0.0.0/33']], [['example.com']], [['10.0.0.1/8/1']], ['127.0.0.1'], [[1]]])('allowedPeers %j is INVALID_ARGUMENT', (value) => {
    expect(() => Runtime.create({ allowedPeers: value as string[] })).toThrow(/INVALID_ARGUMENT.*allowedPeers/);
  });

  it('networkDevices must name devices', () => {
    expect(() => Runtime.create({ networkDevices: [] })).toThrow(/INVALID_ARGUMENT.*networkDevices/);
    expect(() => Runtime.create({ networkDevices: ['lo,eth0'] })).toThrow(/INVALID_ARGUMENT.*networkDevices/);
  });

  it('a malformed GDRPC_ALLOWED_PEERS fails the runtime, naming the variable', () => {
    const before = process.env.GDRPC_ALLOWED_PEERS;
    process.env.GDRPC_ALLOWED_PEERS = '127.0.0.1, 300.1.1.1';
    try {
      expect(() => Runtime.create({})).toThrow(/INVALID_ARGUMENT.*GDRPC_ALLOWED_PEERS/);
      process.env.GDRPC_ALLOWED_PEERS = '127.0.0.1 ::1';
      expect(open({}).allowedPeers).toEqual(['127.0.0.1', '::1']);
    } finally {
      if (before === undefined) delete process.env.GDRPC_ALLOWED_PEERS;
      else process.env.GDRPC_ALLOWED_PEERS = before;
    }
  });
});
