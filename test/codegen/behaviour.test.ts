// Calls through the generated clients against real servers (child processes serving the
// generated handler interfaces over UCX): unary, both streaming kinds, validation on both sides,
// and @remote tensors handed from a prefill server to a decode server.
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code, GdrpcError, serveRemoteTensors, shutdownOwner, Tensor, type MethodDescriptor } from 'gdrpc';
import { Echo } from '../../schemas/gen/echo.ts';
import { DecodeWorker, PrefillWorker, RequestState } from '../../schemas/gen/kv_transfer.ts';
import { Precision, ShardWorker, ShardWorkerDescriptor } from '../../schemas/gen/tensor_parallel.ts';
import { disposePeers, spawnPeer, type Peer } from '../support/peer.ts';
import { here } from './fixture-files.ts';

/** A server-main.ts process and the address it listens on. */
interface ServerPeer { peer: Peer<{ port: number }>; address: string }

async function startServer(): Promise<ServerPeer> {
  const peer = await spawnPeer<{ port: number }>(path.join(here, 'behaviour/server-main.ts'));
  return { peer, address: `127.0.0.1:${peer.ready.port}` };
}

let prefillPeer: ServerPeer;
let decodePeer: ServerPeer;
let prefillClient: Client;
let decodeClient: Client;

beforeAll(async () => {
  // The test process passes @remote tensors: it serves their pulls on loopback.
  serveRemoteTensors({ host: '127.0.0.1' });
  [prefillPeer, decodePeer] = await Promise.all([startServer(), startServer()]);
  prefillClient = await Client.connect(prefillPeer.address);
  decodeClient = await Client.connect(decodePeer.address);
});

afterAll(async () => {
  await shutdownOwner();
  await prefillClient?.close();
  await decodeClient?.close();
  await disposePeers();
});

const f16 = (shape: number[], fill: number): Tensor =>
  Tensor.fromArray(new Uint16Array(shape.reduce((a, b) => a * b, 1)).fill(fill), { shape, dtype: 'f16' });

describe('generated Echo client against a real server', () => {
  it('unary: returns the declared results, tensor included', async () => {
    const echo = Echo.client(prefillClient);
    const payload = Tensor.fromArray(new Uint8Array([1, 2, 3, 250]), { shape: [4] });
    const r = await echo.echo({ text: 'hello', payload });
    expect(r.text).toBe('hello');
    expect(r.payload?.equals(payload)).toBe(true);
    const bare = await echo.echo({ text: 'no tensor' });
    expect(bare).toMatchObject({ text: 'no tensor' });
    expect(bare.payload).toBeUndefined();
    expect(await echo.ping()).toEqual({});
  });

  it('server streaming and client streaming', async () => {
    const echo = Echo.client(prefillClient);
    const items = [];
    for await (const item of echo.repeat({ text: 'x', count: 3 })) items.push(item);
    expect(items).toEqual([{ text: 'x', index: 0 }, { text: 'x', index: 1 }, { text: 'x', index: 2 }]);

    async function* chunks() {
      for (const n of [0, 1, 100, 5000]) yield { chunk: Tensor.zeros([n], 'u8') };
    }
    const total = await echo.collect(chunks());
    expect(total).toMatchObject({ chunks: 4 });
    expect(BigInt(total.bytes)).toBe(5101n);
  });
});

describe('generated ShardWorker client', () => {
  it('calls a class-based handler set (methods keep `this`)', async () => {
    const shard = ShardWorker.client(prefillClient);
    expect((await shard.info()).shard).toEqual({ rank: 1, worldSize: 2, precision: Precision.F16, hiddenShard: 128 });
    const x = f16([2, 4096], 0x3c00);
    const { partial } = await shard.forward({ x, residual: f16([2, 4096], 0), layer: 0, scale: 1 });
    expect(partial.rank).toBe(1);
    expect(partial.y.shape).toEqual([2, 4096]);
    expect(partial.y.equals(x)).toBe(true);
  });

  it('rejects bad arguments before sending, with INVALID_ARGUMENT', async () => {
    const shard = ShardWorker.client(prefillClient);
    const call = shard.forward({ x: f16([2, 4096], 0), residual: f16([3, 4096], 0), layer: 0, scale: 1 });
    await expect(call).rejects.toThrow(GdrpcError);
    await expect(call).rejects.toMatchObject({ code: Code.INVALID_ARGUMENT, message: expect.stringMatching(/residual: dimension 0 \(batch\) is 3/) });
  });

  it('the server validates before its handler runs, even when the caller did not', async () => {
    // A caller with a looser descriptor (any shape) gets past its own check; the server's is the real one.
    const loose: MethodDescriptor = structuredClone(ShardWorkerDescriptor.methods.forward);
    for (const field of loose.args) if (field.type.kind === 'tensor') field.type.shape = [{ kind: 'any' }, { kind: 'any' }];
    const call = prefillClient.unary(loose, { x: f16([2, 8], 0), residual: f16([2, 8], 0), layer: 0, scale: 1 });
    await expect(call).rejects.toMatchObject({ code: Code.INVALID_ARGUMENT, message: expect.stringMatching(/x: dimension 1 is 8, declared 4096/) });
  });
});

describe('KV-cache hand-over with @remote tensors', () => {
  it('the prefill server hands blocks to the decode server, whose generated handler receives handles and pulls them', async () => {
    const prefill = PrefillWorker.client(prefillClient);
    const tokens = Tensor.fromArray(new Int32Array(40).fill(7));
    const out = await prefill.prefill({ requestId: 'r1', tokens, precision: Precision.BF16, decodeWorker: decodePeer.address });
    // READY only if every pulled block held the bytes the prefill side wrote (see server-main.ts).
    expect(out).toEqual({ firstToken: 42, blocks: 3, state: RequestState.READY });

    const decode = DecodeWorker.client(decodeClient);
    const tokensOut = [];
    for await (const t of decode.generate({ requestId: 'r1', maxTokens: 3 })) tokensOut.push(t);
    expect(tokensOut).toEqual([
      { token: 1000, state: RequestState.DECODING },
      { token: 1001, state: RequestState.DECODING },
      { token: 1002, state: RequestState.DONE },
    ]);
  });

  it('the generated acceptPaged takes a paged pool as a handle and pulls the blocks it names by a block table', async () => {
    const decode = DecodeWorker.client(decodeClient);
    // Pool block i holds 0x300 + i; the handler pulls blocks 5, 2 and 7 and checks each.
    const per = 2 * 2 * 16 * 128;
    const pool = Tensor.fromArray(Uint16Array.from({ length: 8 * per }, (_, k) => 0x300 + Math.floor(k / per)), { shape: [8, 2, 2, 16, 128], dtype: 'bf16' });
    expect((await decode.acceptPaged({ requestId: 'r3', pool, blockIds: [5, 2, 7], firstToken: 1 })).state).toBe(RequestState.READY);
    // The same pool with block 2 changed: the handler sees it.
    pool.bytes().fill(0, 2 * per * 2, 2 * per * 2 + 2);
    expect((await decode.acceptPaged({ requestId: 'r4', pool, blockIds: [5, 2, 7], firstToken: 1 })).state).toBe(RequestState.PREFILLING);
  });

  it('a decode handler that finds a wrong block answers PREFILLING, so READY above is a real check', async () => {
    const decode = DecodeWorker.client(decodeClient);
    const wrong = Tensor.fromArray(new Uint16Array(2 * 16 * 128).fill(0x999), { shape: [2, 16, 128], dtype: 'bf16' });
    const out = await decode.accept({ requestId: 'r2', blocks: [{ layer: 0, index: 0, keys: wrong, values: wrong }], firstToken: 1 });
    expect(out.state).toBe(RequestState.PREFILLING);
  });
});
