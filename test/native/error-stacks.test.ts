// Which errors record a JavaScript stack (native/src/status.h Stack): one thrown inside the call
// that failed records its caller's; an operation's failure reported after it started (cancelled,
// its endpoint gone, a completion's error) records none, since the stack then is the event loop's
// or an abort listener's. Recording one cost ~2.5 us an error (CPU box), paid once per posted
// receive when a connection with 16,384 of them closed.
import { afterAll, describe, expect, it } from 'vitest';
import { GdrpcError } from '../../core/errors.ts';
import { Context, Worker } from '../../core/ucx/index.ts';
import { EXACT } from './local.ts';

const context = Context.create({ config: { TLS: 'tcp' } });
const worker = Worker.create(context);
afterAll(async () => {
  await worker.close();
  context.close();
});

const frames = (error: unknown): string[] => String((error as Error).stack).split('\n').filter((line) => /^\s+at /.test(line));

describe('error stacks', () => {
  it('a failure inside the call records the caller\'s stack', () => {
    let error: unknown;
    try {
      Context.create({ config: { NO_SUCH_UCX_VARIABLE: 'x' } });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(GdrpcError);
    expect((error as GdrpcError).message).toMatch(/NO_SUCH_UCX_VARIABLE/);
    expect(frames(error).some((line) => line.includes('error-stacks.test.ts'))).toBe(true);
  });

  it('a pending operation cancelled records none, and Error.stackTraceLimit is left as it was', async () => {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 23;
    try {
      const controllers = Array.from({ length: 3 }, () => new AbortController());
      const receives = controllers.map((controller, k) => worker.tagRecv(Buffer.alloc(8), 0x5150n + BigInt(k), EXACT, { signal: controller.signal }));
      for (const controller of controllers) controller.abort();
      for (const receive of receives) {
        const error = await receive.then(() => undefined, (e: unknown) => e);
        expect(error).toBeInstanceOf(GdrpcError);
        expect((error as GdrpcError).code).toBe('CANCELLED');
        expect((error as GdrpcError).message).toMatch(/tag receive: cancelled/);
        expect(frames(error)).toEqual([]);
      }
      expect(Error.stackTraceLimit).toBe(23);
      // Errors made in JavaScript afterwards record their stacks as before.
      expect(frames(new Error('after')).length).toBeGreaterThan(0);
    } finally {
      Error.stackTraceLimit = limit;
    }
  });
});
