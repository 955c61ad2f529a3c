// RuntimeOptions.sharedMemory: peers on one host that trust each other talk over UCX's shared memory
// instead of TCP loopback, when both runtimes choose it. Runtimes in one process reach each other
// the way two processes do for host memory (runtimes.test.ts), so each case pairs two runtimes.
import { afterEach, describe, expect, it } from 'vitest';
import { callInfo, Client, Code, GdrpcError, Runtime, Server, Tensor, type UnaryHandler } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { rejection, thrown } from './fixtures/thrown.ts';
import { patterned } from './fixtures/tensors.ts';

const opened: Runtime[] = [];

function runtime(sharedMemory?: boolean): Runtime {
  const made = Runtime.create(sharedMemory === undefined ? {} : { sharedMemory });
  opened.push(made);
  return made;
}

afterEach(async () => {
  await Promise.all(opened.splice(0).map((r) => r.close()));
});

/** An Echo server (echo only) listening on loopback on `on`. */
async function echoServer(on: Runtime): Promise<Server> {
  const unimplemented = (name: string): UnaryHandler => () => { throw new GdrpcError(Code.UNIMPLEMENTED, name); };
  const handlers: Record<string, UnaryHandler> = Object.fromEntries(Object.keys(EchoDescriptor.methods).map((name) => [name, unimplemented(name)]));
  handlers.echo = (args: { x: Tensor; tag: string }) => ({ y: args.x, tag: args.tag });
  const server = Server.create({ runtime: on, poolBytes: 8 << 20 }).register(EchoDescriptor, handlers);
  await server.listen({ host: '127.0.0.1', port: 0 });
  return server;
}

/** Echoes `size` patterned bytes through the tag mover; returns the path the argument took. */
async function echoPath(client: Client, size: number): Promise<string | undefined> {
  const x = patterned(size, 3);
  const result = await client.unary(EchoDescriptor.methods.echo, { x, tag: 's' }, { mover: 'tag' });
  const y = result.y as Tensor;
  expect(y.equals(x)).toBe(true);
  y.release();
  return callInfo(result)!.transfers.find((t) => t.argument === 'x')!.path;
}

describe('RuntimeOptions.sharedMemory', () => {
  it('is a boolean: anything else is INVALID_ARGUMENT naming it, and nothing is opened', () => {
    for (const bad of ['yes', 1, null]) {
      const error = thrown(() => Runtime.create({ sharedMemory: bad as unknown as boolean }));
      expect(error.code).toBe(Code.INVALID_ARGUMENT);
      expect(error.message).toContain('sharedMemory');
    }
  });

  it('a value of UCX_MM_ERROR_HANDLING that UCX would refuse is INVALID_ARGUMENT naming the variable, whatever the runtime chose', () => {
    const saved = process.env.UCX_MM_ERROR_HANDLING;
    process.env.UCX_MM_ERROR_HANDLING = 'true';
    try {
      for (const options of [{}, { sharedMemory: false }, { sharedMemory: true }]) {
        const error = thrown(() => opened.push(Runtime.create(options)));
        expect(error.code).toBe(Code.INVALID_ARGUMENT);
        expect(error.message).toContain('UCX_MM_ERROR_HANDLING');
        expect(error.message).toContain('"true"');
      }
    } finally {
      if (saved === undefined) delete process.env.UCX_MM_ERROR_HANDLING;
      else process.env.UCX_MM_ERROR_HANDLING = saved;
    }
  });

  it('the default runtime: checked on every call, and another sharedMemory than it has is FAILED_PRECONDITION', async () => {
    const first = Runtime.default({ sharedMemory: true });
    try {
      expect(first.sharedMemory).toBe(true);
      expect(Runtime.default({ sharedMemory: true })).toBe(first);
      expect(Runtime.default()).toBe(first);
      const conflict = thrown(() => Runtime.default({ sharedMemory: false }));
      expect(conflict.code).toBe(Code.FAILED_PRECONDITION);
      expect(conflict.message).toContain('sharedMemory true');
      expect(thrown(() => Runtime.default({ sharedMemory: 'no' as unknown as boolean })).code).toBe(Code.INVALID_ARGUMENT);
    } finally {
      await first.close();
    }
  });

  it.each([1, 4097, 64 * 1024, 1 << 20])('both sides on it: %i bytes go over shared memory, exact', async (size) => {
    const server = await echoServer(runtime(true));
    const calling = runtime(true);
    expect(calling.sharedMemory).toBe(true);
    const client = await Client.connect(server.address!, { runtime: calling });
    expect(await echoPath(client, size)).toBe('shm');
  });

  it.skipIf(process.env.UCX_MM_ERROR_HANDLING !== undefined)('off by default (UCX_MM_ERROR_HANDLING not set): TCP loopback even to a server on it', async () => {
    const server = await echoServer(runtime(true));
    const calling = runtime();
    expect(calling.sharedMemory).toBe(false);
    const client = await Client.connect(server.address!, { runtime: calling });
    expect(await echoPath(client, 64 * 1024)).toBe('tcp');
  });

  it('false wins over UCX_MM_ERROR_HANDLING=y, and the variable alone turns it on', async () => {
    const saved = process.env.UCX_MM_ERROR_HANDLING;
    process.env.UCX_MM_ERROR_HANDLING = 'y';
    let fromEnvironment: Runtime;
    let off: Runtime;
    try {
      fromEnvironment = runtime();
      off = runtime(false);
    } finally {
      if (saved === undefined) delete process.env.UCX_MM_ERROR_HANDLING;
      else process.env.UCX_MM_ERROR_HANDLING = saved;
    }
    expect(fromEnvironment.sharedMemory).toBe(true);
    expect(off.sharedMemory).toBe(false);
    const server = await echoServer(fromEnvironment);
    const viaEnvironment = await Client.connect(server.address!, { runtime: runtime(true) });
    expect(await echoPath(viaEnvironment, 64 * 1024)).toBe('shm');
    const viaTcp = await Client.connect(server.address!, { runtime: off });
    expect(await echoPath(viaTcp, 64 * 1024)).toBe('tcp');
  });

  it('a client on it that fails for another reason (nothing listening) gets no word about shared memory', async () => {
    // Nothing listens on a port once its server shut down: UCX says "not connected". A reset
    // means something else took the freed port meanwhile (seen once in a CI run with the other
    // suites beside it), and the premise is gone: a fresh port then.
    for (let attempt = 1; ; attempt += 1) {
      const server = await echoServer(runtime(false));
      const port = server.address!.port;
      await server.shutdown({ graceMs: 0 });
      const error = await rejection(Client.connect({ host: '127.0.0.1', port }, { runtime: runtime(true), connectTimeoutMs: 10_000 }));
      expect(error.code).toBe(Code.UNAVAILABLE);
      if (error.ucsStatus === 'UCS_ERR_CONNECTION_RESET' && attempt < 5) continue;
      expect(error.ucsStatus).toBe('UCS_ERR_NOT_CONNECTED');
      expect(error.message).not.toContain('sharedMemory');
      return;
    }
  });

  it('a client on it against a server without it: UNAVAILABLE that says why, and the server serves the next client', async () => {
    const server = await echoServer(runtime(false));
    const error = await rejection(Client.connect(server.address!, { runtime: runtime(true), connectTimeoutMs: 10_000 }));
    expect(error.code).toBe(Code.UNAVAILABLE);
    expect(error.message).toContain('RuntimeOptions.sharedMemory');
    const client = await Client.connect(server.address!, { runtime: runtime(false) });
    expect(await echoPath(client, 64 * 1024)).toBe('tcp');
  });
});
