// Backpressure (core/rpc/connection/room.ts): a call whose REQUEST or RESPONSE would join more than
// its connection's cap waiting for the peer (or any of it, while the runtime holds half of
// maxWaitingBytes) waits unmade until there is room. Honest peers that read asked for more than
// the runtime's maxWaitingBytes lost their connections before (2026-12-07): a client's own
// runtime closed its connection under 80 requests of 4.1 MB, and a server closed clients reading
// 40 answers of 4.1 MB each. The runtimes here take 48 MiB, so that 160 MB pass it; answers
// waiting for room count in it, so past it a server drops some of them (their calls fail) rather
// than hold them uncounted.
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { Client, Code, type GdrpcError, Runtime, Tensor } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { inProcessEcho } from './fixtures/in-process.ts';

const MiB = 1 << 20;
const BYTES = 4_000_000;
const LIMIT = 48 * MiB;

describe('backpressure', () => {
  it(`40 requests of ${BYTES} bytes in flight, 160 MB against the client's maxWaitingBytes of 48 MiB: all answered, the connection kept`, async () => {
    const pair = await inProcessEcho({ echo: ((args: { x: Tensor; tag: string }) => ({ y: args.x, tag: String(args.tag.length) })) as never }, { runtimes: { client: { maxWaitingBytes: LIMIT } } });
    const disconnects: string[] = [];
    pair.client.on('disconnect', (error: Error) => disconnects.push(error.message));
    try {
      const tag = 't'.repeat(BYTES);
      const answers = await Promise.all(Array.from({ length: 40 }, () => pair.client.unary(EchoDescriptor.methods.echo, { x: Tensor.zeros([0], 'u8'), tag }).then((a) => a.tag, (e: Error) => e.message)));
      expect(answers).toEqual(Array(40).fill(String(BYTES)));
      expect(disconnects).toEqual([]);
    } finally {
      await pair.close();
    }
  }, 120_000);

  /** 2 clients x 20 calls answered with BYTES each after a timer (every call passes the point
   *  where a synchronous handler would have met the backlog, and its answer waits for room
   *  instead), against a server whose runtime takes `maxWaitingBytes`: what each call came to
   *  (the answer's length, or its error's code), and the server's disconnects. */
  async function twoClientsAsking(maxWaitingBytes: number): Promise<{ outcomes: Array<number | string>; disconnects: string[] }> {
    const later = async (args: { bytes: number }): Promise<{ pad: string }> => {
      await sleep(1);
      return { pad: 'p'.repeat(args.bytes) };
    };
    const pair = await inProcessEcho({ later: later as never }, { runtimes: { server: { maxWaitingBytes } } });
    const runtime = Runtime.create();
    const disconnects: string[] = [];
    pair.server.on('disconnect', (event: { reason: Error }) => disconnects.push(event.reason.message));
    try {
      const second = await Client.connect(pair.server.address!, { runtime });
      const outcomes = await Promise.all([pair.client, second].flatMap((client) => Array.from({ length: 20 }, () =>
        client.unary(EchoDescriptor.methods.later, { ms: 0, bytes: BYTES }).then((a) => (a.pad as string).length, (e: GdrpcError) => e.code))));
      // Before the clients close: their own closing is a disconnect too.
      const seen = [...disconnects];
      await second.close();
      return { outcomes, disconnects: seen };
    } finally {
      await runtime.close();
      await pair.close();
    }
  }

  it(`2 clients x 20 answers of ${BYTES} bytes made after a wait, 160 MB within the server's maxWaitingBytes but past each connection's 32 MiB: all arrive`, async () => {
    const { outcomes, disconnects } = await twoClientsAsking(256 * MiB);
    expect(outcomes).toEqual(Array(40).fill(BYTES));
    expect(disconnects).toEqual([]);
  }, 120_000);

  it(`2 clients x 20 answers of ${BYTES} bytes made after a wait, 160 MB against the server's maxWaitingBytes of 48 MiB: the answers past it fail RESOURCE_EXHAUSTED, the rest arrive whole, and both connections stay`, async () => {
    // The answers waiting for room count in maxWaitingBytes by what they hold (result-weight.ts):
    // past it, those of the connection whose peer has gone longest without taking any are dropped
    // before any connection is closed. Before they counted, a server held them uncounted (peers
    // taking nothing grew one to 3 GB in 10 s).
    const { outcomes, disconnects } = await twoClientsAsking(LIMIT);
    expect(outcomes.every((o) => o === BYTES || o === Code.RESOURCE_EXHAUSTED)).toBe(true);
    const arrived = outcomes.filter((o) => o === BYTES).length;
    expect(arrived).toBeGreaterThanOrEqual(8);
    expect(arrived).toBeLessThan(40);
    expect(disconnects).toEqual([]);
  }, 120_000);
});
