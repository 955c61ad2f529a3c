// A UCX connection request is the first thing a peer sends, before any admission: its private
// data (the sockaddr data and the client's packed worker address) is the client's own bytes, and
// UCX 1.22 aborts the whole process on some of them when the server makes an endpoint (one
// 80-byte TCP message with a worker address of version 3 did, every time: an always-on
// assertion). The binding checks those bytes first (native/src/conn_request_check.h). The peers
// here write UCX's TCP connection-manager framing by hand: a 16-byte header (the private data's
// length, a status byte) and the private data.
import { connect as tcpConnect } from 'node:net';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from '../rpc/fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { serverStats } from '../rpc/fixtures/stats.ts';

let server: ListeningPeer;

beforeAll(async () => {
  server = await startServer({ admissionTimeoutMs: 1000 });
});
afterAll(disposePeers);

/** Sends one connection request carrying `data` as its private data; resolves once written and
 *  the socket closed after `holdMs`. */
function request(data: Uint8Array, holdMs = 100): Promise<void> {
  return new Promise((resolve) => {
    const header = Buffer.alloc(16);
    header.writeBigUInt64LE(BigInt(data.length), 0);
    const socket = tcpConnect({ host: '127.0.0.1', port: server.port }, () => {
      socket.write(Buffer.concat([header, data]));
      setTimeout(() => { socket.destroy(); resolve(); }, holdMs);
    });
    socket.on('error', () => resolve());
  });
}

/** Private data: an endpoint id, a sockaddr-data header of `saVersion` (1 or 2), then a worker
 *  address whose first byte carries `addressVersion` (1-based, as UCX names them). */
function privateData(saVersion: number, addressVersion: number, rest = new Uint8Array(48)): Uint8Array {
  // Peer error handling, as every gdrpc endpoint asks (v2: a flag; v1: the mode, then address mode CM and a device).
  const head = saVersion === 2 ? [(1 << 5) | 1] : [1, 2, 0];
  return Uint8Array.from([...new Uint8Array(8), ...head, addressVersion - 1, ...rest]);
}

/** A well-behaved client is served; the server's last 'error' messages. */
async function served(): Promise<string[]> {
  const client = await Client.connect(server.address);
  try {
    expect((await client.unary(EchoDescriptor.methods.ping, { n: 5 })).n).toBe(5);
    return (await serverStats(client)).errors;
  } finally {
    await client.close();
  }
}

describe('connection requests a peer writes by hand', () => {
  it.each([[2, 3], [2, 16], [1, 4]])('sockaddr data v%i with a worker address of version %i is refused; the server stays up', async (sa, address) => {
    await request(privateData(sa, address));
    const errors = await served();
    expect(server.child.exitCode).toBeNull();
    expect(errors.at(-1)).toMatch(new RegExp(`connection request from 127\\.0\\.0\\.1:\\d+ refused before UCX read it: it carries a worker address of version ${address}`));
  });

  // A v2 address whose interface says segments of 0 bytes aborted UCX 1.22 further in (an
  // always-on assertion in ucp_ep_config_init), and 255 with distinct sizes used up the worker's
  // endpoint configurations, so that every later client was refused (a helper session's fuzzing).
  // gdrpc peers pack v1 addresses (UCX_ADDRESS_VERSION's default): a v2 one is refused here.
  it('a v2 worker address, where this process packs v1, is refused (one with a segment size of 0 aborted UCX)', async () => {
    await request(Buffer.from('00000000000000002101000080cf190001000000000f000080', 'hex'));
    expect((await served()).at(-1)).toMatch(/refused before UCX read it: it carries a worker address of version 2 where this process packs version 1/);
    expect(server.child.exitCode).toBeNull();
  });

  // UCX aborted on a v1 mode it does not know (ucs_fatal); a mode other than peer is no gdrpc
  // peer's, and each costs the worker an endpoint configuration.
  it.each([[1, 19, /sockaddr data v1 with error-handling mode 19/], [1, 0, /sockaddr data v1 with error-handling mode 0/], [2, 0x20, /sockaddr data v2 without peer error handling \(flags 0\)/], [2, 0x23, /without peer error handling \(flags 3\)/]] as const)(
    'sockaddr data v%i with error-handling byte %i is refused; the server stays up', async (sa, header, text) => {
      const data = privateData(sa, 1);
      data[8] = header;
      await request(data);
      expect((await served()).at(-1)).toMatch(text);
      expect(server.child.exitCode).toBeNull();
    });

  it('600 requests of random bytes behind a v1 worker address, and 200 with no private data: the server stays up and serves', async () => {
    const sends: Array<Promise<void>> = [];
    for (let i = 0; i < 800; i += 1) {
      const data = i < 200 ? new Uint8Array(0) : privateData(i % 3 === 0 ? 1 : 2, 1, randomBytes(Math.floor(Math.random() * 400)));
      sends.push(request(data, 20));
      if (sends.length >= 32) await Promise.all(sends.splice(0));
    }
    await Promise.all(sends);
    await served();
    expect(server.child.exitCode).toBeNull();
  }, 120_000);
});
