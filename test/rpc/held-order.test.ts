// A connection's later control messages, held aside by the binding's sweep while one of its
// messages waits alone for the rest of its bytes (Worker.sweepHold; docs/binding.md "The sweep"),
// are read after it, in the order they came. The client's UCX sends every message as a rendezvous
// (UCX_RNDV_THRESH=0, read when its context is made): each of the server's receives waits for its
// bytes, and with many calls in flight the next ones come meanwhile.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code, GdrpcError, Runtime, Server, type UnaryHandler } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';

let serving: Runtime;
let calling: Runtime;

beforeAll(() => {
  serving = Runtime.create();
  const before = process.env.UCX_RNDV_THRESH;
  process.env.UCX_RNDV_THRESH = '0';
  try {
    calling = Runtime.create();
  } finally {
    if (before === undefined) delete process.env.UCX_RNDV_THRESH;
    else process.env.UCX_RNDV_THRESH = before;
  }
});

afterAll(async () => {
  await calling?.close();
  await serving?.close();
});

describe('messages held aside while one of their connection waits', () => {
  it('are read after it, in order: every call answered with its own argument', async () => {
    // The order of one connection's REQUESTs is the order their handler runs in.
    const ran: number[] = [];
    const handlers = Object.fromEntries(Object.keys(EchoDescriptor.methods).map((name) => [name, (() => { throw new GdrpcError(Code.UNIMPLEMENTED, name); }) as UnaryHandler]));
    handlers.ping = ((args: { n: number }) => {
      ran.push(args.n);
      return { n: args.n };
    }) as UnaryHandler;
    const server = Server.create({ runtime: serving }).register(EchoDescriptor, handlers);
    const { port } = await server.listen({ host: '127.0.0.1' });
    const client = await Client.connect({ host: '127.0.0.1', port }, { runtime: calling });
    try {
      // Rounds of 64 calls in flight until the sweep held some (on loopback most rendezvous finish
      // before the next message comes; a few rounds see it).
      let next = 0;
      for (let round = 0; round < 200 && serving.worker.stats().heldTotal === 0; round += 1) {
        ran.length = 0;
        const first = next;
        const calls = Array.from({ length: 64 }, () => next++);
        const answers = await Promise.all(calls.map((n) => client.unary(EchoDescriptor.methods.ping, { n })));
        expect(answers.map((a) => a.n)).toEqual(calls);
        expect(ran).toEqual(calls.map((_, i) => first + i));
      }
      expect(serving.worker.stats().heldTotal).toBeGreaterThan(0);
      expect(serving.worker.stats().heldMessages).toBe(0);
    } finally {
      await client.close();
      await server.shutdown({ graceMs: 0 });
    }
  }, 120_000);
});
