// A deadline holds in every phase of a call: while reconnecting (a handshake that never
// completes), while 256 MiB of argument bytes are held up by a stopped server, in the handler,
// between the items of a result stream. Each call fails DEADLINE_EXCEEDED close to its deadline;
// the measured lateness is printed (the bound asserted is loose: a loaded machine runs timers late).
import { createServer, type Server as NetServer, type Socket } from 'node:net';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { Client, Code, GdrpcError } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { TestClients } from './fixtures/clients.ts';
import { startServer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { patterned } from './fixtures/tensors.ts';

const LATE_BOUND_MS = 1500;
const clients = new TestClients();

afterEach(async () => {
  await clients.closeAll();
  await disposePeers();
});
afterAll(async () => { await disposePeers(); });

/** Runs `call` with the deadline `ms` from now; returns its error and how late it came. */
async function lateness(ms: number, call: (deadline: Date) => Promise<unknown>): Promise<{ error: GdrpcError; lateMs: number }> {
  const deadline = new Date(Date.now() + ms);
  const error = await call(deadline).then(() => undefined, (e: unknown) => e);
  const lateMs = Date.now() - deadline.getTime();
  expect(error).toBeInstanceOf(GdrpcError);
  return { error: error as GdrpcError, lateMs };
}

function report(phase: string, lateMs: number): void {
  console.log(`[deadline-phases] ${phase}: failed ${lateMs} ms after the deadline`);
}

describe('deadlines in every phase', () => {
  it('reconnecting: a handshake that never completes', async () => {
    // A port below the ephemeral range (32768+), which no socket of UCX's own can hold meanwhile.
    let server: Awaited<ReturnType<typeof startServer>> | undefined;
    for (let attempt = 0; server === undefined; attempt += 1) {
      const port = 20_000 + Math.floor(Math.random() * 10_000);
      server = await startServer({ port }).catch((error: unknown) => { if (attempt >= 10) throw error; return undefined; });
    }
    const client = await clients.connect(server.address, { livenessMs: 3000 });
    await client.unary(EchoDescriptor.methods.ping, { n: 1 });
    const gone = new Promise((resolve) => client.once('disconnect', resolve));
    server.kill();
    await gone;
    await server.exited;
    // Something that accepts TCP connections on the same port and never answers.
    const sockets: Socket[] = [];
    const silent: NetServer = createServer((socket) => { sockets.push(socket); });
    await new Promise<void>((resolve, reject) => { silent.once('error', reject); silent.listen(server.port, '127.0.0.1', resolve); });
    try {
      const { error, lateMs } = await lateness(400, (deadline) => client.unary(EchoDescriptor.methods.ping, { n: 2 }, { deadline }));
      report('handshake', lateMs);
      expect(error.code).toBe(Code.DEADLINE_EXCEEDED);
      expect(lateMs).toBeLessThan(LATE_BOUND_MS);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it('argument bytes: a 256 MiB upload to a stopped server', async () => {
    await using server = await startServer({ poolBytes: 300 << 20, maxTensorBytes: 300 << 20 });
    const client = await clients.connect(server.address, { poolBytes: 0 });
    await client.unary(EchoDescriptor.methods.ping, { n: 1 });
    const x = patterned(256 << 20, 3);
    server.stop();
    try {
      const { error, lateMs } = await lateness(500, (deadline) => client.unary(EchoDescriptor.methods.checksum, { x }, { deadline }));
      report('argument bytes', lateMs);
      expect(error.code).toBe(Code.DEADLINE_EXCEEDED);
      expect(lateMs).toBeLessThan(LATE_BOUND_MS);
    } finally {
      server.resume();
    }
  });

  it('handler', async () => {
    await using server = await startServer();
    const client = await clients.connect(server.address);
    const { error, lateMs } = await lateness(300, (deadline) => client.unary(EchoDescriptor.methods.sleep, { ms: 10_000 }, { deadline }));
    report('handler', lateMs);
    expect(error.code).toBe(Code.DEADLINE_EXCEEDED);
    expect(lateMs).toBeLessThan(LATE_BOUND_MS);
  });

  it('results: between the items of a stream', async () => {
    await using server = await startServer();
    const client = await clients.connect(server.address);
    const items: number[] = [];
    const { error, lateMs } = await lateness(300, async (deadline) => {
      for await (const item of client.serverStream(EchoDescriptor.methods.count, { upTo: 1000, delayMs: 50 }, { deadline })) items.push(item.i as number);
    });
    report('stream results', lateMs);
    expect(error.code).toBe(Code.DEADLINE_EXCEEDED);
    expect(items.length).toBeGreaterThan(0);
    expect(lateMs).toBeLessThan(LATE_BOUND_MS);
  });
});
