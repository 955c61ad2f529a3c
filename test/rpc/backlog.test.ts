// A peer that reads, with more waiting for it than its window takes at once: many large inline
// answers (or requests) in flight. What waits for its window is not a peer taking nothing, and the
// connection must carry all of it (docs/wire.md "Message window"). Until 2026-12-07 more than
// 32 MiB waiting closed the connection at once, reader or not: 16 calls answered with 4 MB strings
// failed "Connection reset by remote peer" (a helper session's review).
import { describe, expect, it } from 'vitest';
import { inProcessEcho } from './fixtures/in-process.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { Tensor } from '../../core/index.ts';

const BYTES = 4_000_000;
const CALLS = 16;

describe('a backlog for a peer that reads', () => {
  it(`${CALLS} answers of ${BYTES} bytes in flight at once all arrive`, async () => {
    const errors: string[] = [];
    const pair = await inProcessEcho({ later: ((args: { bytes: number }) => ({ pad: 'p'.repeat(args.bytes) })) as never });
    pair.server.on('error', (error) => errors.push(error.message));
    try {
      for (let round = 0; round < 3; round += 1) {
        const answers = await Promise.all(Array.from({ length: CALLS }, () => pair.client.unary(EchoDescriptor.methods.later, { ms: 0, bytes: BYTES })));
        expect(answers.map((answer) => (answer.pad as string).length)).toEqual(Array(CALLS).fill(BYTES));
      }
      expect(errors).toEqual([]);
    } finally {
      await pair.close();
    }
  }, 120_000);

  it(`${CALLS} requests of ${BYTES} bytes in flight at once are all answered`, async () => {
    const errors: string[] = [];
    const pair = await inProcessEcho({ echo: ((args: { x: Tensor; tag: string }) => ({ y: args.x, tag: String(args.tag.length) })) as never });
    pair.server.on('error', (error) => errors.push(error.message));
    try {
      const tag = 't'.repeat(BYTES);
      for (let round = 0; round < 3; round += 1) {
        const answers = await Promise.all(Array.from({ length: CALLS }, () => pair.client.unary(EchoDescriptor.methods.echo, { x: Tensor.zeros([0], 'u8'), tag })));
        expect(answers.map((answer) => answer.tag)).toEqual(Array(CALLS).fill(String(BYTES)));
      }
      expect(errors).toEqual([]);
    } finally {
      await pair.close();
    }
  }, 120_000);
});
