// The control receive loop answers first and watches again after: a server whose watch took a
// REQUEST sends the RESPONSE before it arms the watch for the next message (posting the next
// receive first, as the loop did before the watch, put its cost between every message and its
// answer). Recorded by wrapping the binding's control operations, a server and a client on two
// runtimes of this process.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Runtime, Server, Worker, Endpoint } from '../../core/index.ts';
import { BenchDescriptor } from '../../bench/schemas/gen/rpc_bench.ts';
import { native } from '../../core/native.ts';
import { FrameKind } from '../../core/wire/frames.ts';

type Op = 'watch' | 'taken' | 'send' | 'credit';
const events: Array<{ worker: Worker; op: Op }> = [];
const watch = Worker.prototype.tagWatch;
const sendNow = Endpoint.prototype.tagSendNow;

let serving: Runtime;
let calling: Runtime;

beforeAll(() => {
  Worker.prototype.tagWatch = function (this: Worker, tag, mask, slot, taken) {
    events.push({ worker: this, op: 'watch' });
    return watch.call(this, tag, mask, slot, () => {
      events.push({ worker: this, op: 'taken' });
      taken();
    });
  };
  Endpoint.prototype.tagSendNow = function (this: Endpoint, tag, src) {
    // The message window's CREDIT on call 0 (a message of its own, once a quarter window was read).
    const view = src as Uint8Array;
    const credit = view[0] === FrameKind.Credit && view[1] === 0 && view[2] === 0 && view[3] === 0 && view[4] === 0;
    events.push({ worker: this.worker, op: credit ? 'credit' : 'send' });
    return sendNow.call(this, tag, src);
  };
  serving = Runtime.create();
  calling = Runtime.create();
});

afterAll(async () => {
  Worker.prototype.tagWatch = watch;
  Endpoint.prototype.tagSendNow = sendNow;
  await calling.close();
  await serving.close();
});

describe('the control receive loop', () => {
  // The thread wake-up watches again at once (test/rpc/dispatcher-drain.test.ts has both builds' order).
  it.skipIf(native().wakeup !== 'uv')('sends the answer to a message it waited for before it watches for the next (uv wake-up)', async () => {
    const server = Server.create({ runtime: serving, poolBytes: 1 << 20 }).register(BenchDescriptor, {
      ping: () => ({}),
      sink: () => ({ n: 0n }),
    });
    const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
    const client = await Client.connect({ host: '127.0.0.1', port }, { runtime: calling });
    for (let i = 0; i < 20; i += 1) await client.unary(BenchDescriptor.methods.ping, {});
    events.length = 0;
    for (let i = 0; i < 200; i += 1) await client.unary(BenchDescriptor.methods.ping, {});
    const all = events.filter((e) => e.worker === serving.worker).map((e) => e.op);
    await client.close();
    const credits = all.filter((op) => op === 'credit').length;
    const ops = all.filter((op) => op !== 'credit');
    // Each REQUEST the server waited for: the next operations of its worker are the RESPONSE's
    // send, then the next watch (the loop goes on). The client's ACK of a CREDIT is a message too,
    // answered by nothing: the next watch follows it, once per credit at most.
    const next = ops.flatMap((op, i) => (op === 'taken' && i + 2 < ops.length ? [ops[i + 1] === 'watch' ? 'watch' : `${ops[i + 1]} ${ops[i + 2]}`] : []));
    expect(next.filter((n) => n === 'send watch').length).toBeGreaterThan(100);
    expect(next.filter((n) => n === 'watch').length).toBeLessThanOrEqual(credits);
    expect(new Set(next.filter((n) => n !== 'watch'))).toEqual(new Set(['send watch']));
  });
});
