// Deadlines before, during and after a 64 MiB transfer and during a handler; cancellation by
// the caller mid-handler and mid-transfer. The server must see each (ctx.signal) and give back
// every buffer.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code, type Tensor } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { codeOf, expectPoolsEmpty, serverStats } from './fixtures/stats.ts';
import { patterned } from './fixtures/tensors.ts';

const MiB = 1 << 20;
let server: ListeningPeer;
let client: Client;
let big: Tensor;

beforeAll(async () => {
  server = await startServer({ poolBytes: 200 * MiB, maxTensorBytes: 128 * MiB });
  client = await Client.connect(server.address, { poolBytes: 80 * MiB });
  big = patterned(64 * MiB, 5);
});
afterAll(async () => {
  await client?.close();
  await disposePeers();
});

describe('deadlines', () => {
  it('a deadline already past fails DEADLINE_EXCEEDED and never reaches the handler', async () => {
    const before = (await serverStats(client)).runs.sleep ?? 0;
    expect(await codeOf(client.unary(EchoDescriptor.methods.sleep, { ms: 10 }, { deadline: new Date(Date.now() - 1) }))).toBe(Code.DEADLINE_EXCEEDED);
    expect(await codeOf(client.unary(EchoDescriptor.methods.echo, { x: big, tag: 'd' }, { deadline: 0 }))).toBe(Code.DEADLINE_EXCEEDED);
    expect((await serverStats(client)).runs.sleep ?? 0).toBe(before);
  });

  it('the error names the method and its deadline, on the caller and in the handler (a helper session using the package met a bare "deadline exceeded")', async () => {
    const error = await client.unary(EchoDescriptor.methods.sleep, { ms: 5000 }, { deadline: 300 }).then(() => undefined, (e: { code: string; rawMessage: string }) => e);
    expect(error?.code).toBe(Code.DEADLINE_EXCEEDED);
    // 300 ms, or 299 where a millisecond passed between the call's reading of the clock for its
    // deadline and the scope's for its start.
    expect(error?.rawMessage).toMatch(/^deadline exceeded \(Echo\.sleep, its deadline (299|300) ms after it began\)$/);
    // The handler's signal says the same where the server's own timer (from the REQUEST's `to`)
    // fired first, else that the client's CANCEL said so.
    await expect.poll(async () => (await serverStats(client)).aborted.some((a) => /^sleep:.*deadline exceeded \((Echo\.sleep, its deadline \d+ ms after it began|client)\)/.test(a)), { timeout: 5000 }).toBe(true);
  });

  it('a deadline during the handler fails the call on time and aborts ctx.signal on the server', async () => {
    const started = Date.now();
    expect(await codeOf(client.unary(EchoDescriptor.methods.sleep, { ms: 5000 }, { deadline: 300 }))).toBe(Code.DEADLINE_EXCEEDED);
    // Well before the handler's 5 s, with room for a loaded machine's late timers.
    expect(Date.now() - started).toBeLessThan(3000);
    await expect.poll(async () => (await serverStats(client)).aborted.some((a) => /sleep:.*deadline/.test(a)), { timeout: 5000 }).toBe(true);
  });

  for (const mover of ['tag'] as const) {
    it(`a deadline during a 64 MiB ${mover} transfer fails the call; buffers come back`, async () => {
      const started = Date.now();
      expect(await codeOf(client.unary(EchoDescriptor.methods.echo, { x: big, tag: 'mid' }, { deadline: 15, mover }))).toBe(Code.DEADLINE_EXCEEDED);
      expect(Date.now() - started).toBeLessThan(1000);
      expect((await client.unary(EchoDescriptor.methods.ping, { n: 9 })).n).toBe(9);
      await expectPoolsEmpty(client);
    });
  }

  for (const deadline of [2 ** 31, 2 ** 31 + 5, 1e12, Number.MAX_SAFE_INTEGER, Infinity]) {
    it(`a deadline of ${deadline} ms is far away, not overflowed: the call completes`, async () => {
      const result = await client.unary(EchoDescriptor.methods.sleep, { ms: 50 }, { deadline });
      expect(result.aborted).toBe(false);
    });
  }

  it('a deadline after the transfer lets the call complete', async () => {
    const result = await client.unary(EchoDescriptor.methods.echo, { x: big, tag: 'late' }, { deadline: 60_000 });
    const y = result.y as Tensor;
    expect(y.equals(big)).toBe(true);
    y.release();
  });
});

describe('cancellation', () => {
  it('aborting mid-handler fails CANCELLED at once and aborts the handler', async () => {
    const controller = new AbortController();
    const before = (await serverStats(client)).aborted.length;
    setTimeout(() => controller.abort(), 200);
    const started = Date.now();
    expect(await codeOf(client.unary(EchoDescriptor.methods.sleep, { ms: 5000 }, { signal: controller.signal }))).toBe(Code.CANCELLED);
    expect(Date.now() - started).toBeLessThan(3000);
    await expect.poll(async () => (await serverStats(client)).aborted.slice(before).some((a) => /^sleep:.*cancel/i.test(a)), { timeout: 5000 }).toBe(true);
  });

  for (const mover of ['tag'] as const) {
    it(`aborting mid-transfer (${mover}) fails CANCELLED and leaves nothing behind`, async () => {
      const controller = new AbortController();
      setTimeout(() => controller.abort(), 10);
      expect(await codeOf(client.unary(EchoDescriptor.methods.echo, { x: big, tag: 'c' }, { signal: controller.signal, mover }))).toBe(Code.CANCELLED);
      expect((await client.unary(EchoDescriptor.methods.ping, { n: 10 })).n).toBe(10);
      await expectPoolsEmpty(client);
    });
  }

  it('an already aborted signal never sends the call', async () => {
    const before = (await serverStats(client)).runs.sleep ?? 0;
    expect(await codeOf(client.unary(EchoDescriptor.methods.sleep, { ms: 1 }, { signal: AbortSignal.abort() }))).toBe(Code.CANCELLED);
    expect((await serverStats(client)).runs.sleep ?? 0).toBe(before);
  });
});
