// A runtime closes, whatever its peers do. A server's shutdown() closes its connections
// gracefully (UCX flushes what was sent before the endpoint goes), and the runtime's close then
// closes what is left by force; but a graceful close waits for the peer, and a client whose
// process stopped with answers on their way (rendezvous sends its UCX never asks for) never lets
// it finish. Until 2026-12-07 the runtime's close waited for it for ever.
import { afterEach, describe, expect, it } from 'vitest';
import type { ChildProcess } from 'node:child_process';
import { Code, GdrpcError, Runtime, Server, type UnaryHandler } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { spawnStopping } from '../security/fixtures/stopping.ts';

const children: ChildProcess[] = [];
afterEach(() => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
});

/** Settles with 'closed' once `closing` does, or 'waiting' after `ms`. */
async function within(closing: Promise<unknown>, ms: number): Promise<'closed' | 'waiting'> {
  let timer: NodeJS.Timeout | undefined;
  const waited = new Promise<'waiting'>((resolve) => { timer = setTimeout(() => resolve('waiting'), ms); });
  try {
    return await Promise.race([closing.then(() => 'closed' as const), waited]);
  } finally {
    clearTimeout(timer);
  }
}

describe('a runtime whose client stopped with answers on their way', () => {
  it('closes after its server shut down: the graceful close left waiting for that client is ended by the worker', async () => {
    const runtime = Runtime.create();
    const handlers: Record<string, UnaryHandler> = Object.fromEntries(Object.keys(EchoDescriptor.methods).map((name) => [name, (() => { throw new GdrpcError(Code.UNIMPLEMENTED, name); }) as UnaryHandler]));
    handlers.later = (async (args: { ms: number; bytes: number }) => {
      await new Promise((resolve) => setTimeout(resolve, args.ms));
      return { pad: 'p'.repeat(args.bytes) };
    }) as UnaryHandler;
    const server = Server.create({ runtime }).register(EchoDescriptor, handlers);
    const { port } = await server.listen({ host: '127.0.0.1' });
    // Twenty calls answered after 300 ms with 1 MiB each, in a 64 MiB window: the client has
    // stopped by then, and the answers are rendezvous messages whose bytes it never asks for.
    const frozen = spawnStopping('frozen-client.ts', [port, 20, 300, 1 << 20, 64 << 20]);
    children.push(frozen.child);
    expect(await frozen.started).toBe(true);
    await expect.poll(() => runtime.waitingBytes, { timeout: 20_000, interval: 50 }).toBeGreaterThan(8 << 20);
    await server.shutdown({ graceMs: 0 });
    // Before, this waited for ever; now it takes what the worker's close takes.
    expect(await within(runtime.close(), 30_000)).toBe('closed');
    expect(runtime.worker.closed).toBe(true);
  }, 90_000);
});
