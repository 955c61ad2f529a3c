// CallContext.afterSend: a handler's hook runs once its response has left, whether the call
// moved tensors or not, and also when the handler registers it after returning (the call then has
// nothing left to release, and no release pass of its own to run the hook with).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code, GdrpcError, Runtime, Server, type CallContext, type UnaryHandler } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { patterned } from './fixtures/tensors.ts';

let serving: Runtime;
let calling: Runtime;
let client: Client;
const ran: string[] = [];
const reported: GdrpcError[] = [];

beforeAll(async () => {
  serving = Runtime.create();
  calling = Runtime.create();
  const unimplemented = (name: string): UnaryHandler => () => { throw new GdrpcError(Code.UNIMPLEMENTED, name); };
  const handlers: Record<string, UnaryHandler> = Object.fromEntries(Object.keys(EchoDescriptor.methods).map((name) => [name, unimplemented(name)]));
  handlers.ping = (args: { n: number }, ctx: CallContext) => {
    if (args.n === 7) {
      // A hook that throws: reported, and the next hook still runs (the throw was an unhandled
      // rejection, which ends a Node process by default).
      ctx.afterSend(() => { throw new Error('hook broke'); });
      ctx.afterSend(() => ran.push('after the broken hook'));
      return { n: args.n };
    }
    if (args.n === 1) ctx.afterSend(() => ran.push('during'));
    // Registered after the handler returned: the call is over by then.
    else setTimeout(() => ctx.afterSend(() => ran.push(`late ${args.n}`)), 20);
    return { n: args.n };
  };
  handlers.echo = (args: { x: unknown; tag: string }, ctx: CallContext) => {
    ctx.afterSend(() => ran.push(`echo ${args.tag}`));
    // A second hook, registered once the call's release pass (its argument tensor back to the
    // pool, the hooks so far run) is long over: it ran never (a helper session's review).
    if (args.tag === 'late') setTimeout(() => ctx.afterSend(() => ran.push('echo late, after the release pass')), 300);
    return { y: args.x, tag: args.tag };
  };
  // A handler that takes its context apart: the functions stay bound to the call.
  handlers.checksum = async (args: { x: { byteLength: number } }, ctx: CallContext) => {
    const { afterSend, confirmedTransfers, signal, peer } = ctx;
    const transfers = await confirmedTransfers();
    // A Proxy of the context and an object made from it read through to the call.
    const proxied = new Proxy(ctx, {});
    const derived = Object.create(ctx) as CallContext;
    const through = [proxied.signal === signal, derived.transfers.length, typeof proxied.afterSend, typeof derived.confirmedTransfers].join(' ');
    afterSend(() => ran.push(`apart ${transfers.length} ${signal.aborted} ${peer.startsWith('127.0.0.1:')} ${through}`));
    return { sum: 0, n: args.x.byteLength };
  };
  const server = Server.create({ runtime: serving, poolBytes: 8 << 20 }).register(EchoDescriptor, handlers);
  server.on('error', (error) => reported.push(error));
  await server.listen({ host: '127.0.0.1', port: 0 });
  client = await Client.connect(server.address!, { runtime: calling });
});
afterAll(async () => {
  await client.close();
  await calling.close();
  await serving.close();
});

describe('CallContext.afterSend', () => {
  it('runs a hook registered while the handler ran, with and without tensors', async () => {
    expect((await client.unary(EchoDescriptor.methods.ping, { n: 1 })).n).toBe(1);
    const result = await client.unary(EchoDescriptor.methods.echo, { x: patterned(64 << 10, 3), tag: 't' });
    (result.y as { release(): void }).release();
    await expect.poll(() => ran, { timeout: 5000 }).toEqual(expect.arrayContaining(['during', 'echo t']));
  });

  it('runs a hook registered after the call released its argument tensors and ran its hooks', async () => {
    const result = await client.unary(EchoDescriptor.methods.echo, { x: patterned(64 << 10, 5), tag: 'late' });
    (result.y as { release(): void }).release();
    await expect.poll(() => ran, { timeout: 5000 }).toContain('echo late');
    await expect.poll(() => ran, { timeout: 5000 }).toContain('echo late, after the release pass');
  });

  it('a hook that throws is reported as the server\'s error, and the hooks after it run', async () => {
    const rejections: unknown[] = [];
    const onRejection = (reason: unknown): void => { rejections.push(reason); };
    process.on('unhandledRejection', onRejection);
    try {
      expect((await client.unary(EchoDescriptor.methods.ping, { n: 7 })).n).toBe(7);
      await expect.poll(() => ran, { timeout: 5000 }).toContain('after the broken hook');
      await expect.poll(() => reported.map((e) => e.rawMessage), { timeout: 5000 }).toContain('afterSend hook of handler Echo.ping threw: hook broke');
      const report = reported.find((e) => e.rawMessage.startsWith('afterSend hook'))!;
      expect(report.code).toBe(Code.INTERNAL);
      expect(report.details).toMatchObject({ method: 'Echo.ping', service: 'test.rpc.v1.Echo' });
      expect((report.cause as Error).message).toBe('hook broke');
      expect(rejections).toEqual([]);
    } finally {
      process.off('unhandledRejection', onRejection);
    }
  });

  it('works for a handler that takes its context apart ({ afterSend, confirmedTransfers, signal }), proxies it or derives from it', async () => {
    expect((await client.unary(EchoDescriptor.methods.checksum, { x: patterned(64 << 10, 4) })).n).toBe(64 << 10);
    await expect.poll(() => ran, { timeout: 5000 }).toContain('apart 1 false true true 1 function function');
  });

  it('runs a hook registered after the handler returned (a call with nothing to release)', async () => {
    expect((await client.unary(EchoDescriptor.methods.ping, { n: 2 })).n).toBe(2);
    await expect.poll(() => ran, { timeout: 5000 }).toContain('late 2');
  });
});
