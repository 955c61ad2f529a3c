// Two Runtimes in one process: each its own UCX worker, pools and remote-tensor owner. A server on
// one and a client on the other talk over loopback like two processes would (host memory only:
// cuda_ipc does not reach between two workers of one process, DESIGN.md), and closing one runtime
// closes its clients and servers without touching the other's.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Client, Code, GdrpcError, remoteExposures, Runtime, serveRemoteTensors, Server, Tensor,
  type RemoteTensor, type UnaryHandler,
} from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { rejection } from './fixtures/thrown.ts';
import { RawServer } from './fixtures/raw-server.ts';
import { byteSum, patterned } from './fixtures/tensors.ts';

let serving: Runtime;
let calling: Runtime;
let address: { host: string; port: number };

/** A server of Echo's echo and pullSum on `runtime`. */
async function echoServer(runtime: Runtime): Promise<Server> {
  const unimplemented = (name: string): UnaryHandler => () => { throw new GdrpcError(Code.UNIMPLEMENTED, name); };
  const handlers: Record<string, UnaryHandler> = Object.fromEntries(Object.keys(EchoDescriptor.methods).map((name) => [name, unimplemented(name)]));
  handlers.echo = (args: { x: Tensor; tag: string }) => ({ y: args.x, tag: args.tag });
  handlers.pullSum = async (args: { h: RemoteTensor }) => {
    const tensor = await args.h.pull();
    try {
      return { sum: byteSum(tensor) };
    } finally {
      tensor.release();
    }
  };
  const server = Server.create({ runtime, poolBytes: 8 << 20 }).register(EchoDescriptor, handlers);
  await server.listen({ host: '127.0.0.1', port: 0 });
  return server;
}


beforeAll(async () => {
  serving = Runtime.create();
  calling = Runtime.create();
  address = (await echoServer(serving)).address!;
});
afterAll(async () => {
  await calling.close();
  await serving.close();
});

describe('two runtimes in one process', () => {
  it('are independent: a worker, a context and a remote-tensor owner each', () => {
    expect(serving.worker).not.toBe(calling.worker);
    expect(serving.context).not.toBe(calling.context);
    expect(serving.owner).not.toBe(calling.owner);
    expect(Runtime.current()).not.toBe(serving);
  });

  it.each([0, 1, 4096, 64 * 1024, 1 << 20])('a client on one calls a server on the other: %i bytes, exact, received into the caller\'s pool', async (size) => {
    const client = await Client.connect(address, { runtime: calling });
    try {
      const x = patterned(size, size % 13);
      const result = await client.unary(EchoDescriptor.methods.echo, { x, tag: `n${size}` });
      const y = result.y as Tensor;
      expect(y.equals(x)).toBe(true);
      if (size > 4096) expect(calling.pools()).toContain(y.pool);
      y.release();
    } finally {
      await client.close();
    }
  });

  it('a remote handle is owned and served by the runtime that exposed it', async () => {
    const client = await Client.connect(address, { runtime: calling });
    try {
      const h = patterned(256 * 1024, 5);
      // Nothing on the calling runtime serves pulls yet: a listening server elsewhere does not count.
      expect((await rejection(client.unary(EchoDescriptor.methods.pullSum, { h }))).code).toBe(Code.FAILED_PRECONDITION);
      serveRemoteTensors({ host: '127.0.0.1', runtime: calling });
      const result = await client.unary(EchoDescriptor.methods.pullSum, { h });
      expect(result.sum).toBe(byteSum(h));
      await expect.poll(() => remoteExposures(calling), { timeout: 5000 }).toBe(0);
      expect(remoteExposures(serving)).toBe(0);
    } finally {
      await client.close();
    }
  });

  it('closing one runtime closes its clients and servers and leaves the other working', async () => {
    const doomed = Runtime.create();
    const doomedServer = await echoServer(doomed);
    const client = await Client.connect(address, { runtime: doomed });
    const toDoomed = await Client.connect(doomedServer.address!, { runtime: calling });
    await doomed.close();
    expect(doomed.closed).toBe(true);
    expect((await rejection(client.unary(EchoDescriptor.methods.echo, { x: patterned(8), tag: 'late' }))).code).toBe(Code.FAILED_PRECONDITION);
    expect((await rejection(Client.connect(address, { runtime: doomed }))).code).toBe(Code.INVALID_ARGUMENT);
    expect(() => doomed.createPool({ device: 'cpu', bytes: 1 << 20 })).toThrow(/closed/);
    // The server that closed with it is gone; the runtimes left still talk to each other.
    expect((await rejection(toDoomed.unary(EchoDescriptor.methods.echo, { x: patterned(8), tag: 'gone' }, { deadline: 3000 }))).code).toMatch(/UNAVAILABLE|DEADLINE_EXCEEDED/);
    await toDoomed.close();
    const survivor = await Client.connect(address, { runtime: calling });
    try {
      const x = patterned(64 * 1024, 3);
      const y = (await survivor.unary(EchoDescriptor.methods.echo, { x, tag: 'after' })).y as Tensor;
      expect(y.equals(x)).toBe(true);
      y.release();
    } finally {
      await survivor.close();
    }
  });

  // A connect the runtime's close overtook resolved with a closed client, whose every call then
  // failed FAILED_PRECONDITION (a helper session's fault hunt: 10 of 10 tries): it rejects now.
  it('closing a runtime while a client of it connects: the connect rejects rather than hand back a closed client', async () => {
    for (let round = 0; round < 5; round += 1) {
      const doomed = Runtime.create();
      const outcome = Client.connect(address, { runtime: doomed }).then(async (client) => { await client.close(); return 'connected'; }, (error: GdrpcError) => error.code);
      await new Promise((resolve) => setTimeout(resolve, round % 3));
      await doomed.close();
      expect(await outcome).toMatch(/FAILED_PRECONDITION|UNAVAILABLE|CANCELLED/);
    }
  });

  // A client's close waited for its connect under way to run its course: a runtime closed while
  // a client of it waited for a HELLO its server never sent took the whole connect timeout (20 s
  // here) to close. The connect gives up when the close comes.
  it('closing a runtime while a client of it waits for a server that never answers: the close does not wait for the connect timeout', async () => {
    const silent = RawServer.listen();
    const doomed = Runtime.create();
    try {
      const outcome = Client.connect(`127.0.0.1:${silent.listener.port}`, { runtime: doomed, connectTimeoutMs: 120_000 }).then(() => 'connected', (error: GdrpcError) => error);
      await silent.accepted();
      const started = performance.now();
      await doomed.close();
      const error = await outcome;
      expect(error).toMatchObject({ code: Code.FAILED_PRECONDITION, message: expect.stringMatching(/closed while it connected/) });
      // Well short of the connect timeout, however slow the machine.
      expect(performance.now() - started).toBeLessThan(60_000);
    } finally {
      await silent.close();
    }
  }, 150_000);

  it('an explicit runtime stays open after its last client closes (only close() ends it)', async () => {
    const client = await Client.connect(address, { runtime: calling });
    await client.close();
    expect(calling.closed).toBe(false);
    const again = await Client.connect(address, { runtime: calling });
    await again.close();
  });
});

describe('a closed runtime', () => {
  it('is collected once nothing of the application holds it: nothing native keeps its dispatcher (a helper session found every closed runtime kept for good, 8 MiB of buffers each)', () => {
    const fixture = fileURLToPath(new URL('./fixtures/runtime-gc.ts', import.meta.url));
    const runtimes = 8;
    const out = execFileSync(process.execPath, ['--expose-gc', '--import', 'tsx', fixture, String(runtimes)], { encoding: 'utf8', timeout: 120_000 });
    expect(out).toContain(`COLLECTED ${runtimes} of ${runtimes}`);
    // Before, the 8 closed runtimes' send slots and receive buffers stayed: 64 MiB (checked).
    const grew = Number(/ARRAYBUFFERS GREW (-?\d+)/.exec(out)?.[1]);
    expect(grew).toBeLessThan(2 << 20);
  });
});
