// A server's allocation for a call's argument tensor is served without the call's AbortSignal
// when the pool has room (an AbortSignal and its listener cost microseconds a call); only an
// allocation that has to wait makes one, and cancelling the call still ends that wait.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Code, type Client, type GdrpcError, type Server } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { inProcessEcho, type InProcessEcho } from './fixtures/in-process.ts';
import { byteSum, patterned } from './fixtures/tensors.ts';

const KiB = 1 << 10;
let pair: InProcessEcho;
let server: Server;
let client: Client;
/** Resolves the hold handler's wait. */
let releaseHold: () => void = () => {};
let holding = 0;

/** AbortControllers made in this process while `run` runs. */
async function controllersMadeBy(run: () => Promise<void>): Promise<number> {
  const Original = globalThis.AbortController;
  let made = 0;
  globalThis.AbortController = class Counted extends Original {
    constructor() {
      super();
      made += 1;
    }
  };
  try {
    await run();
  } finally {
    globalThis.AbortController = Original;
  }
  return made;
}

beforeAll(async () => {
  pair = await inProcessEcho({
    checksum: (args: { x: { byteLength: number } }) => ({ sum: byteSum(args.x as never), n: args.x.byteLength }),
    hold: async (args: { x: unknown }) => {
      holding += 1;
      await new Promise<void>((resolve) => { releaseHold = resolve; });
      return { sum: byteSum(args.x as never) };
    },
  }, {
    // A wait far longer than any poll below: only the call's signal can end one in time.
    server: { poolBytes: 256 * KiB, maxTensorBytes: 256 * KiB, poolWaitMs: 600_000 },
    client: { poolBytes: 0 },
  });
  ({ server, client } = pair);
});
afterEach(() => releaseHold());
afterAll(() => pair.close());

describe('server allocations for argument tensors', () => {
  it('a tensor the pool has room for is received without an AbortSignal, over tag and inline', async () => {
    const x = patterned(64 * KiB, 5);
    for (const mover of ['tag', 'inline'] as const) {
      // Warm: the connection and the first call's one-off setup are not what this counts.
      await client.unary(EchoDescriptor.methods.checksum, { x }, { mover });
      let sums: number[] = [];
      const made = await controllersMadeBy(async () => {
        sums = [];
        for (let i = 0; i < 20; i += 1) sums.push((await client.unary(EchoDescriptor.methods.checksum, { x }, { mover })).sum as number);
      });
      expect(sums).toEqual(Array(20).fill(byteSum(x)));
      expect(made, mover).toBe(0);
    }
    x.release();
  });

  it('an allocation that has to wait gets the call\'s signal: cancelling the call ends the wait, and the next call is served', async () => {
    const first = patterned(192 * KiB, 1);
    const second = patterned(192 * KiB, 2);
    holding = 0;
    const held = client.unary(EchoDescriptor.methods.hold, { x: first, ms: 0 });
    await expect.poll(() => holding, { timeout: 20_000, interval: 10 }).toBe(1);
    const waiting = (): number => server.poolStats().reduce((n, pool) => n + pool.waiting, 0);
    // 192 KiB more does not fit beside the held 192 KiB in 256 KiB: the allocation waits (for up
    // to poolWaitMs, 10 minutes) under the call's signal.
    const stop = new AbortController();
    let error: unknown;
    const made = await controllersMadeBy(async () => {
      const call = client.unary(EchoDescriptor.methods.checksum, { x: second }, { signal: stop.signal, mover: 'tag' }).then(() => undefined, (e: unknown) => e);
      await expect.poll(waiting, { timeout: 20_000, interval: 10 }).toBe(1);
      stop.abort();
      error = await call;
    });
    expect((error as GdrpcError).code).toBe(Code.CANCELLED);
    // The server's wait made the call's signal (the test's own controller was made before counting).
    expect(made).toBeGreaterThanOrEqual(1);
    // The cancel reaches the server, whose signal ends the wait long before poolWaitMs.
    await expect.poll(waiting, { timeout: 20_000, interval: 10 }).toBe(0);
    releaseHold();
    expect((await held).sum).toBe(byteSum(first));
    expect((await client.unary(EchoDescriptor.methods.checksum, { x: second })).sum).toBe(byteSum(second));
    first.release();
    second.release();
  });
});
