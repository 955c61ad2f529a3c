// A server's graceful shutdown and a client whose process is busy when its answers come. The
// server waits for its drained clients to close their connections themselves before it closes
// them (a socket closed with unread input sends a reset, and the client loses what it had not
// read): until 2026-12-07 that wait was 2 s whatever graceMs said, and a client busy for 4.5 s
// right after its calls lost 7 of 8 answers (a helper session's review). What is left of
// graceMs once the calls ended now goes to that wait.
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { Code, GdrpcError, Runtime, Server, type UnaryHandler } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { disposePeers, spawnPeer } from '../support/peer.ts';

const CALLS = 8;
const BUSY_MS = 5000;

afterAll(() => disposePeers());

describe('shutdown with a client busy when its answers come', () => {
  it(`the client busy for ${BUSY_MS} ms reads all ${CALLS} answers when graceMs leaves it the time`, async () => {
    const runtime = Runtime.create();
    const handlers: Record<string, UnaryHandler> = Object.fromEntries(Object.keys(EchoDescriptor.methods).map((name) => [name, (() => { throw new GdrpcError(Code.UNIMPLEMENTED, name); }) as UnaryHandler]));
    let answered = 0;
    handlers.later = (async (args: { ms: number; bytes: number }) => {
      await new Promise((resolve) => setTimeout(resolve, args.ms));
      answered += 1;
      return { pad: 'p'.repeat(args.bytes) };
    }) as UnaryHandler;
    const server = Server.create({ runtime }).register(EchoDescriptor, handlers);
    const { port } = await server.listen({ host: '127.0.0.1' });
    try {
      const program = fileURLToPath(new URL('./fixtures/busy-client.ts', import.meta.url));
      const client = await spawnPeer(program, { args: [`127.0.0.1:${port}`, String(CALLS), '300', String(BUSY_MS)] });
      // Every call answered (its RESPONSE handed to UCX) while the client is busy, then shut down.
      await expect.poll(() => answered, { timeout: 20_000, interval: 20 }).toBe(CALLS);
      await server.shutdown({ graceMs: 3 * BUSY_MS });
      const exit = await client.end(30_000);
      expect(exit.code).toBe(0);
      expect(client.output()).toContain(`OUTCOMES ${JSON.stringify(Array(CALLS).fill('OK'))}`);
    } finally {
      await server.shutdown({ graceMs: 0 });
      await runtime.close();
    }
  }, 90_000);
});
