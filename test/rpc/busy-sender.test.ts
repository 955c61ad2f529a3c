// A client whose process is busy for a moment right after it sent calls keeps its connection. Its
// rendezvous messages wait for it to send their bytes: the server's receive of the first waits,
// and the later ones are held aside behind it (docs/binding.md "The sweep"). Until 2026-12-07 such
// a receive was given up on after one second while other messages waited, its own held ones
// counting, and the connection closed: a client busy for 2.5 s after 8 calls lost 6 of them. It
// now has the connection's liveness time, as a silent peer has.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Code, GdrpcError, Runtime, Server, type UnaryHandler } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';

describe('a client busy right after it sent its calls', () => {
  it('keeps its connection for less than its liveness time: every call answered', async () => {
    const runtime = Runtime.create();
    const handlers: Record<string, UnaryHandler> = Object.fromEntries(Object.keys(EchoDescriptor.methods).map((name) => [name, (() => { throw new GdrpcError(Code.UNIMPLEMENTED, name); }) as UnaryHandler]));
    handlers.ping = ((args: { n: number }) => ({ n: args.n })) as UnaryHandler;
    const server = Server.create({ runtime }).register(EchoDescriptor, handlers);
    const disconnects: string[] = [];
    server.on('disconnect', (event) => disconnects.push(event.reason.message));
    try {
      const { port } = await server.listen({ host: '127.0.0.1' });
      const fixture = fileURLToPath(new URL('./fixtures/busy-sender.ts', import.meta.url));
      const output = await new Promise<string>((resolve, reject) => {
        execFile(process.execPath, ['--import', 'tsx', fixture, String(port), '8', '2500'], { timeout: 90_000 }, (error, stdout, stderr) => {
          if (error) reject(new Error(`busy-sender failed: ${error.message}\n${stderr}`));
          else resolve(stdout);
        });
      });
      expect(JSON.parse(output.trim().split('\n').at(-1)!)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
      // It closed its connection itself at the end; none was given up on.
      expect(disconnects.filter((reason) => /did not arrive whole/.test(reason))).toEqual([]);
      expect(runtime.dispatcher.stats().stalledReceives).toBe(0);
    } finally {
      await server.shutdown({ graceMs: 0 });
      await runtime.close();
    }
  }, 120_000);
});
