// A frame that announces tag-moved tensors and those tensors' bytes leave together: the bytes'
// send is posted inside the flush that handed the frame's message to UCX, with no promise hop in
// between (which had left the bytes 10-14 µs behind their frame on the H200 machine, with the
// receiver waiting for them). Both directions: a REQUEST's arguments and a RESPONSE's results, and
// a server stream's items.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client, Tensor, UnaryHandler } from '../../core/index.ts';
import { Endpoint } from '../../core/ucx/endpoint.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { inProcessEcho, type InProcessEcho } from './fixtures/in-process.ts';
import { byteSum, patterned } from './fixtures/tensors.ts';

let pair: InProcessEcho;
let client: Client;

beforeAll(async () => {
  pair = await inProcessEcho({
    echo: (args: { x: unknown; tag: string }) => ({ y: args.x, tag: args.tag }),
    repeat: (async function* repeat(args: { x: Tensor; times: number }) {
      for (let i = 0; i < args.times; i += 1) yield { y: args.x, i };
    }) as unknown as UnaryHandler,
  }, {
    server: { poolBytes: 4 << 20 },
    client: { poolBytes: 4 << 20 },
  });
  client = pair.client;
});
afterAll(() => pair.close());

/** Runs `calls` with the endpoints' tag sends watched: for each tensor payload sent after a control
 *  message UCX sent inside the call, whether that message had had a microtask turn since. (A
 *  message UCX sends later tells its frame later: the bytes then follow it from that completion,
 *  not judged here; `unjudged` counts those.) */
async function watchPayloads(calls: () => Promise<void>): Promise<{ afterTurn: boolean[]; unjudged: number }> {
  const sendNow = Endpoint.prototype.tagSendNow;
  const tagSend = Endpoint.prototype.tagSend;
  const afterTurn: boolean[] = [];
  let unjudged = 0;
  // Per endpoint: client and server share this process (and the prototypes).
  const lastFrames = new WeakMap<Endpoint, { turned: boolean; inline: boolean }>();
  Endpoint.prototype.tagSendNow = function (this: Endpoint, ...args: Parameters<Endpoint['tagSendNow']>) {
    const frame = { turned: false, inline: false };
    lastFrames.set(this, frame);
    queueMicrotask(() => { frame.turned = true; });
    const result = sendNow.apply(this, args);
    frame.inline = result === undefined;
    return result;
  };
  Endpoint.prototype.tagSend = function (this: Endpoint, ...args: unknown[]) {
    const lastFrame = lastFrames.get(this);
    if (lastFrame?.inline === true) afterTurn.push(lastFrame.turned);
    else unjudged += 1;
    return (tagSend as (...a: unknown[]) => unknown).apply(this, args);
  } as Endpoint['tagSend'];
  try {
    await calls();
  } finally {
    Endpoint.prototype.tagSendNow = sendNow;
    Endpoint.prototype.tagSend = tagSend;
  }
  return { afterTurn, unjudged };
}

describe('a frame and the bytes it announces', () => {
  it('the bytes\' tag send is posted before a microtask queued at the frame\'s send runs, for arguments and results alike', async () => {
    const { afterTurn, unjudged } = await watchPayloads(async () => {
      const x = patterned(256 << 10, 9);
      for (let i = 0; i < 5; i += 1) {
        const result = await client.unary(EchoDescriptor.methods.echo, { x, tag: String(i) }, { mover: 'tag' });
        expect(byteSum(result.y as Tensor)).toBe(byteSum(x));
        (result.y as Tensor).release();
      }
      x.release();
    });
    // Five calls: each moved its argument and its result by tag.
    expect(afterTurn.length + unjudged).toBe(10);
    expect(afterTurn.length).toBeGreaterThan(0);
    expect(afterTurn.filter(Boolean)).toEqual([]);
  });

  it('so do the bytes of a server stream\'s items, each after its STREAM_ITEM frame', async () => {
    const x = patterned(256 << 10, 3);
    const items: number[] = [];
    const { afterTurn, unjudged } = await watchPayloads(async () => {
      for await (const item of client.serverStream(EchoDescriptor.methods.repeat, { x, times: 4 }, { mover: 'tag' })) {
        expect(byteSum(item.y as Tensor)).toBe(byteSum(x));
        (item.y as Tensor).release();
        items.push(item.i as number);
      }
    });
    x.release();
    expect(items).toEqual([0, 1, 2, 3]);
    // The argument and four items moved by tag.
    expect(afterTurn.length + unjudged).toBe(5);
    expect(afterTurn.length).toBeGreaterThan(1);
    expect(afterTurn.filter(Boolean)).toEqual([]);
  });
});
