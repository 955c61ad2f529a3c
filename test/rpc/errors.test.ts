// Status codes a caller sees for calls the server must refuse, and proof that the refusal came
// before the handler ran or anything was allocated.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code, GdrpcError, Tensor } from '../../core/index.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { EchoWrongDType, Missing, MissingMethod } from './fixtures/services.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { patterned } from './fixtures/tensors.ts';

const MiB = 1 << 20;
let server: ListeningPeer;
let client: Client;

async function serverStats(): Promise<{ runs: Record<string, number>; aborted: string[]; activeCalls: number; pools: Array<{ used: number; liveTensors: number }> }> {
  const result = await client.unary(EchoDescriptor.methods.stats, {});
  return JSON.parse(result.json as string);
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  const error = await promise.then(() => undefined, (e: unknown) => e);
  expect(error).toBeInstanceOf(GdrpcError);
  return (error as GdrpcError).code;
}

beforeAll(async () => {
  server = await startServer({ poolBytes: 4 * MiB, maxTensorBytes: 2 * MiB, maxFrameBytes: 64 * 1024 });
  client = await Client.connect(server.address);
});
afterAll(async () => {
  await client?.close();
  await disposePeers();
});

describe('refusals', () => {
  it('unknown service and unknown method are NOT_FOUND', async () => {
    expect(await codeOf(client.unary(Missing, {}))).toBe(Code.NOT_FOUND);
    expect(await codeOf(client.unary(MissingMethod, {}))).toBe(Code.NOT_FOUND);
  });

  it('a wrong dtype is INVALID_ARGUMENT and the handler never runs', async () => {
    const before = (await serverStats()).runs.echo ?? 0;
    const x = Tensor.fromArray(new Float32Array(4096)); // 16 KiB: a tag transfer the server must refuse
    const error = await client.unary(EchoWrongDType.methods.echo!, { x, tag: 'f32' }).catch((e: GdrpcError) => e);
    expect((error as GdrpcError).code).toBe(Code.INVALID_ARGUMENT);
    expect((error as GdrpcError).message).toMatch(/dtype f32, declared u8/);
    expect((await serverStats()).runs.echo ?? 0).toBe(before);
    // The refused payload left nothing pending: the connection still works.
    expect((await client.unary(EchoDescriptor.methods.ping, { n: 3 })).n).toBe(3);
  });

  it('a wrong rank or a symbol bound twice differently is INVALID_ARGUMENT (caller side)', async () => {
    const x = Tensor.fromArray(new Uint8Array(6), { shape: [2, 3] });
    expect(await codeOf(client.unary(EchoDescriptor.methods.echo, { x, tag: 'r' }))).toBe(Code.INVALID_ARGUMENT);
    expect(await codeOf(client.unary(EchoDescriptor.methods.echo, { x: patterned(4) }))).toBe(Code.INVALID_ARGUMENT);
    expect(await codeOf(client.unary(EchoDescriptor.methods.ping, { n: -1 }))).toBe(Code.INVALID_ARGUMENT);
  });

  it('a tensor over the server limit is RESOURCE_EXHAUSTED before allocation', async () => {
    const error = await client.unary(EchoDescriptor.methods.echo, { x: patterned(3 * MiB), tag: 'big' }).catch((e: GdrpcError) => e);
    expect((error as GdrpcError).code).toBe(Code.RESOURCE_EXHAUSTED);
    const stats = await serverStats();
    expect(stats.pools.every((pool) => pool.used === 0)).toBe(true);
  });

  it('a frame over the server limit is RESOURCE_EXHAUSTED', async () => {
    const error = await client.unary(EchoDescriptor.methods.echo, { x: patterned(100 * 1024), tag: 'inline' }, { mover: 'inline' }).catch((e: GdrpcError) => e);
    expect((error as GdrpcError).code).toBe(Code.RESOURCE_EXHAUSTED);
    expect((await client.unary(EchoDescriptor.methods.ping, { n: 4 })).n).toBe(4);
  });

  it('a full pool makes an argument wait for memory, not fail; the pool recovers', async () => {
    // 4 MiB pool: two concurrent 1.5 MiB tensors fit; the third waits until one is released.
    const calls = [1, 2, 3].map(() => client.unary(EchoDescriptor.methods.echo, { x: patterned(1.5 * MiB), tag: 'p' }));
    const settled = await Promise.allSettled(calls);
    const codes = settled.map((s) => (s.status === 'fulfilled' ? 'OK' : (s.reason as GdrpcError).code));
    expect(codes).toEqual(['OK', 'OK', 'OK']);
    for (const s of settled) if (s.status === 'fulfilled') (s.value.y as Tensor).release();
    // Everything came back: one more fits.
    const ok = await client.unary(EchoDescriptor.methods.echo, { x: patterned(1.5 * MiB), tag: 'p' });
    expect((ok.y as Tensor).byteLength).toBe(1.5 * MiB);
    (ok.y as Tensor).release();
    await expect.poll(async () => (await serverStats()).pools.every((pool) => pool.used === 0), { timeout: 5000 }).toBe(true);
  });

  it('noStaging is honoured for host memory (nothing to stage)', async () => {
    const result = await client.unary(EchoDescriptor.methods.echo, { x: patterned(64 * 1024), tag: 'ns' }, { noStaging: true });
    expect((result.y as Tensor).byteLength).toBe(64 * 1024);
    (result.y as Tensor).release();
  });
});
