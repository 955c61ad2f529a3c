// Transparent retry: a unary call that certainly never ran at the server (the error says
// `unprocessed`, as a server shutting down does, or the REQUEST was never handed to UCX) is tried
// once more; a call that may have run is never retried. Server and client share this process.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code, GdrpcError, Server } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';

const server = Server.create();
const plan: Array<'ok' | 'unprocessed' | 'failed'> = [];
let runs = 0;
let client: Client;

server.register(EchoDescriptor, {
  ...Object.fromEntries(Object.keys(EchoDescriptor.methods).map((name) => [name, () => { throw new GdrpcError(Code.UNIMPLEMENTED, name); }])),
  ping: (args: { n: number }) => {
    runs += 1;
    const next = plan.shift() ?? 'ok';
    if (next === 'unprocessed') throw new GdrpcError(Code.UNAVAILABLE, 'not taken', { details: { unprocessed: true } });
    if (next === 'failed') throw new GdrpcError(Code.UNAVAILABLE, 'went away midway');
    return { n: args.n };
  },
});

beforeAll(async () => {
  const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
  client = await Client.connect(`127.0.0.1:${port}`);
});
afterAll(async () => {
  await client?.close();
  await server.shutdown({ graceMs: 0 });
});

describe('transparent retry', () => {
  it('a call refused unprocessed is retried once and succeeds', async () => {
    runs = 0;
    plan.splice(0, plan.length, 'unprocessed', 'ok');
    expect((await client.unary(EchoDescriptor.methods.ping, { n: 5 })).n).toBe(5);
    expect(runs).toBe(2);
  });

  it('only once: a second unprocessed refusal reaches the caller', async () => {
    runs = 0;
    plan.splice(0, plan.length, 'unprocessed', 'unprocessed', 'ok');
    const error = await client.unary(EchoDescriptor.methods.ping, { n: 6 }).then(() => undefined, (e: unknown) => e as GdrpcError);
    expect(error?.code).toBe(Code.UNAVAILABLE);
    expect(error?.details?.unprocessed).toBe(true);
    expect(runs).toBe(2);
  });

  it('a call that may have run is not retried', async () => {
    runs = 0;
    plan.splice(0, plan.length, 'failed', 'ok');
    const error = await client.unary(EchoDescriptor.methods.ping, { n: 7 }).then(() => undefined, (e: unknown) => e as GdrpcError);
    expect(error?.code).toBe(Code.UNAVAILABLE);
    expect(error?.message).toMatch(/went away midway/);
    expect(runs).toBe(1);
  });

  it('a call whose deadline has passed is not retried', async () => {
    runs = 0;
    plan.splice(0, plan.length, 'unprocessed', 'ok');
    const error = await client.unary(EchoDescriptor.methods.ping, { n: 8 }, { deadline: new Date(Date.now() - 1) }).then(() => undefined, (e: unknown) => e as GdrpcError);
    expect(error?.code).toBe(Code.DEADLINE_EXCEEDED);
    expect(runs).toBe(0);
    plan.splice(0);
  });
});
