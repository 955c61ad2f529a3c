// Two paths of teardown at once (a SIGTERM handler beside another, the runtime's close during a
// server's graceful shutdown): every caller of Server.shutdown and Client.close waits for the
// same end, and a shorter grace time cuts the longer one short (found by helper 57: a second
// shutdown resolved at once with 5 calls still draining, and a runtime closed during a graceful
// shutdown left that shutdown's promise pending for ever).
import { describe, expect, it } from 'vitest';
import { Client, Code, GdrpcError, Runtime, Server, type UnaryHandler } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { RawPeer } from './fixtures/raw-peer.ts';
import { echoHandlers } from './fixtures/in-process.ts';

/** A server whose sleep handler waits until its call is aborted, a client of it, `calls` sleep
 *  calls in flight (their outcomes), and the two runtimes. */
async function sleepers(calls: number) {
  const serving = Runtime.create();
  const calling = Runtime.create();
  let started = 0;
  const sleep: UnaryHandler = (_args, call) => {
    started += 1;
    return new Promise((_resolve, reject) => call.signal.addEventListener('abort', () => reject(call.signal.reason)));
  };
  const server = Server.create({ runtime: serving }).register(EchoDescriptor, echoHandlers({ sleep }));
  await server.listen({ host: '127.0.0.1', port: 0 });
  const client = await Client.connect(server.address!, { runtime: calling });
  const outcomes = Array.from({ length: calls }, () => client.unary(EchoDescriptor.methods.sleep, { ms: 600_000 }).then(() => 'OK', (error: GdrpcError) => error.code));
  await expect.poll(() => started, { timeout: 10_000 }).toBe(calls);
  return { serving, calling, server, client, outcomes };
}

describe('teardown called twice', () => {
  it('a second Server.shutdown answers the first one\'s promise, settled with every call ended, and its grace time of 0 cuts the first one\'s 10 minutes short', async () => {
    const { serving, calling, server, client, outcomes } = await sleepers(5);
    let firstDone = false;
    const first = server.shutdown({ graceMs: 600_000 }).then(() => { firstDone = true; });
    const second = server.shutdown({ graceMs: 0 });
    expect(server.shutdown()).toBe(second);
    await second;
    expect(firstDone).toBe(true);
    await first;
    expect(server.activeCalls).toBe(0);
    expect(await Promise.all(outcomes)).toEqual(Array(5).fill(Code.UNAVAILABLE));
    await client.close();
    await calling.close();
    await serving.close();
  });

  it('a runtime closed during its server\'s graceful shutdown: the shutdown settles (its calls fail UNAVAILABLE), and so does the close', async () => {
    const { serving, calling, server, client, outcomes } = await sleepers(3);
    let shutdownDone = false;
    const shutdown = server.shutdown({ graceMs: 600_000 }).then(() => { shutdownDone = true; });
    // The runtime's close waits for the shutdown under way (before, it went on without it, and
    // that shutdown's promise stayed pending while nothing else kept the process alive).
    await serving.close();
    expect(shutdownDone).toBe(true);
    await shutdown;
    expect(server.activeCalls).toBe(0);
    expect(await Promise.all(outcomes)).toEqual(Array(3).fill(Code.UNAVAILABLE));
    await client.close();
    await calling.close();
  });

  it.each(['a second shutdown with graceMs 0', 'the runtime\'s close'])('%s shortens the wait for clients to close too: a client that ignores GOAWAY holds it for the 2 s floors, not the first shutdown\'s 10 minutes (a review found it held for the whole first grace time)', async (how) => {
    const serving = Runtime.create();
    // A liveness time longer than the test: the silent peer is not closed for its silence.
    const server = Server.create({ runtime: serving, livenessMs: 600_000 }).register(EchoDescriptor, echoHandlers());
    const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
    // Admitted, no calls, and deaf to GOAWAY: the shutdown waits for it to close its connection.
    const raw = await RawPeer.connect(port);
    try {
      await raw.auth();
      expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
      let shutdownDone = false;
      const shutdown = server.shutdown({ graceMs: 600_000 }).then(() => { shutdownDone = true; });
      await new Promise((resolve) => setTimeout(resolve, 100));
      // This test's time limit (30 s) is what fails it otherwise.
      if (how === 'the runtime\'s close') await serving.close();
      else await server.shutdown({ graceMs: 0 });
      expect(shutdownDone).toBe(true);
      await shutdown;
    } finally {
      await raw.close();
      await serving.close();
    }
  }, 30_000);

  it('a second Client.close answers the first one\'s promise', async () => {
    const { serving, calling, server, client, outcomes } = await sleepers(2);
    const first = client.close();
    expect(client.close()).toBe(first);
    await first;
    expect(await Promise.all(outcomes)).toEqual(Array(2).fill(Code.CANCELLED));
    await server.shutdown({ graceMs: 0 });
    await calling.close();
    await serving.close();
  });

  it('Server.shutdown with a bad option rejects, and shuts nothing down', async () => {
    const serving = Runtime.create();
    const server = Server.create({ runtime: serving });
    await server.listen({ host: '127.0.0.1', port: 0 });
    await expect(server.shutdown({ graceMs: -1 })).rejects.toMatchObject({ code: Code.INVALID_ARGUMENT });
    const client = await Client.connect(server.address!);
    await client.close();
    await server.shutdown({ graceMs: 0 });
    await serving.close();
  });
});
