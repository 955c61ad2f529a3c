// Programs a gdrpc process starts do not inherit UCX's sockets and event descriptors: a child that
// outlived its parent's server kept the server's listening port, and a server restarted there
// could not listen until the child ended (found by a helper session using the package).
import { spawn, spawnSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Client, closeUcxDescriptorsOnExec, Runtime, Server, type UnaryHandler } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { echoHandlers } from './fixtures/in-process.ts';

/** Echo's methods: ping answers, the rest are not needed here. */
const pingHandlers = (): Record<string, UnaryHandler> => echoHandlers({ ping: (args: { n: number }) => ({ n: args.n }) });

const opened: Array<{ close(): Promise<unknown> }> = [];
afterEach(async () => {
  for (const item of opened.splice(0).reverse()) await item.close();
});

/** The sockets and anonymous-inode descriptors a program started now inherits (`ls` lists its
 *  own descriptors: 0-2 are its pipes, the rest came from this process). */
function inherited(): string[] {
  const listing = spawnSync('ls', ['-l', '/proc/self/fd'], { encoding: 'utf8' });
  expect(listing.status).toBe(0);
  return listing.stdout.split('\n')
    .map((line) => /\s(\d+) -> (socket:\[\d+\]|anon_inode:.*)$/.exec(line))
    .filter((m): m is RegExpExecArray => m !== null && Number(m[1]) > 2)
    .map((m) => `${m[1]} -> ${m[2]}`);
}

describe('close-on-exec', () => {
  it('a program started after a server listened and a client connected inherits none of their descriptors', async () => {
    const runtime = Runtime.create();
    opened.push({ close: () => runtime.close() });
    const server = Server.create({ runtime });
    server.register(EchoDescriptor, pingHandlers());
    opened.push({ close: () => server.shutdown({ graceMs: 0 }) });
    const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
    const client = await Client.connect({ host: '127.0.0.1', port }, { runtime });
    opened.push(client);
    expect((await client.unary(EchoDescriptor.methods.ping, { n: 1 })).n).toBe(1);
    expect(inherited()).toEqual([]);
    // On demand: -1 where one close_range marked everything (Linux 5.11), else the count the scan
    // marked, none by now.
    expect([-1, 0]).toContain(closeUcxDescriptorsOnExec());
  });

  it('a program started while a connection waits for admission (its peer sent no AUTH) inherits none of its sockets', async () => {
    const runtime = Runtime.create();
    opened.push({ close: () => runtime.close() });
    const server = Server.create({ runtime, admissionTimeoutMs: 60_000 });
    server.register(EchoDescriptor, pingHandlers());
    opened.push({ close: () => server.shutdown({ graceMs: 0 }) });
    const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
    const silent = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('./fixtures/silent-peer.ts', import.meta.url)), String(port)], { stdio: ['ignore', 'pipe', 'inherit'] });
    opened.push({ close: async () => { silent.kill('SIGKILL'); } });
    const said = new Promise<string>((resolve) => {
      createInterface({ input: silent.stdout! }).on('line', resolve);
      silent.once('exit', (code) => resolve(`exited ${code}`));
    });
    expect(await said).toBe('STARTED');
    // Its HELLO was read: the connection and its lane are open here (before, two sockets of them
    // were inherited until the next admission in this process marked them).
    expect(runtime.worker.stats().liveEndpoints).toBeGreaterThanOrEqual(1);
    expect(inherited()).toEqual([]);
  });

  it('a child that outlives the server does not keep its port: a server listens there again at once', async () => {
    const first = Server.create();
    first.register(EchoDescriptor, pingHandlers());
    const { port } = await first.listen({ host: '127.0.0.1', port: 0 });
    const client = await Client.connect({ host: '127.0.0.1', port });
    expect((await client.unary(EchoDescriptor.methods.ping, { n: 1 })).n).toBe(1);
    await client.close();
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    opened.push({ close: async () => { child.kill('SIGKILL'); } });
    await first.shutdown({ graceMs: 0 });
    const second = Server.create();
    second.register(EchoDescriptor, pingHandlers());
    opened.push({ close: () => second.shutdown({ graceMs: 0 }) });
    await second.listen({ host: '127.0.0.1', port });
    const again = await Client.connect({ host: '127.0.0.1', port });
    opened.push(again);
    expect((await again.unary(EchoDescriptor.methods.ping, { n: 2 })).n).toBe(2);
    expect(child.exitCode).toBe(null);  // still running: it held nothing of the port
  });
});
