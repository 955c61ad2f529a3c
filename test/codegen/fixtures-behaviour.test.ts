// Each golden fixture's committed output, used as a real client against a real server (a child
// process serving the same generated modules, behaviour/fixtures-server.ts): what the language
// can express (every scalar, 64-bit integers, bytes, lists, maps, optionals, recursive structs,
// enums, every dtype and rank 0, streaming both ways, remote arguments and remote stream items,
// imported types, struct-scoped dimension names) survives a round trip through the runtime.
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code, serveRemoteTensors, shutdownOwner, Tensor, type DType } from 'gdrpc';
import { Collections } from './fixtures/collections/expected/collections.ts';
import { Docs } from './fixtures/docs/expected/docs.ts';
import { Mode } from './fixtures/imports/expected/common/block.ts';
import { Pipeline } from './fixtures/imports/expected/pipeline.ts';
import { Library } from './fixtures/remote/expected/remote.ts';
import { Scalars, type AllScalars } from './fixtures/scalars/expected/scalars.ts';
import { Streams } from './fixtures/streaming/expected/streaming.ts';
import { Color, Trees } from './fixtures/structs_enums/expected/structs_enums.ts';
import { Moe } from './fixtures/struct_dims/expected/struct_dims.ts';
import { Tensors } from './fixtures/tensors/expected/tensors.ts';
import { disposePeers, spawnPeer } from '../support/peer.ts';
import { here } from './fixture-files.ts';

let client: Client;

beforeAll(async () => {
  // The test process passes @remote tensors: it serves their pulls on loopback.
  serveRemoteTensors({ host: '127.0.0.1' });
  const server = await spawnPeer<{ port: number }>(path.join(here, 'behaviour/fixtures-server.ts'));
  client = await Client.connect(`127.0.0.1:${server.ready.port}`);
});

afterAll(async () => {
  await shutdownOwner();
  await client?.close();
  await disposePeers();
});

const filled = (shape: number[], dtype: DType, value: number | bigint): Tensor => {
  const t = Tensor.zeros(shape, dtype);
  (t.toArray() as unknown as { fill(v: number | bigint): void }).fill(value);
  return t;
};

describe('fixture behaviour through generated clients', () => {
  it('scalars: every scalar type, 64-bit integers as bigint, bytes', async () => {
    const value: AllScalars = {
      flag: true, a: -128, b: -32768, c: 2147483647, d: -(2n ** 63n), e: 255, f: 65535, g: 4294967295, h: 2n ** 64n - 1n,
      x: 1.5, y: Math.PI, name: 'gdrpc', raw: new Uint8Array([0, 1, 255]),
    };
    const r = await Scalars.client(client).roundTrip({ value, count: 3n });
    expect(r.value).toEqual({ ...value, name: 'GDRPC' });
    expect(BigInt(r.total)).toBe(2147483650n);
    expect(await Scalars.client(client).nothing()).toEqual({});
  });

  it('collections: lists, nested lists, maps and optionals', async () => {
    const c = Collections.client(client);
    const item = { id: 1, label: 'one' };
    expect(await c.lists({ ids: [1, 2, 3], nested: [['a'], ['b', 'c'], []], items: [item, { id: 2 }] })).toEqual({ count: 8 });
    expect(await c.maps({ byName: { x: item, y: { id: 2 } }, counts: { z: [1n, 2n] } })).toEqual({ names: ['x', 'y', 'z'] });
    expect((await c.optionals({ maybeItems: [undefined, item] })).found).toEqual(item);
    expect((await c.optionals({})).found).toBeUndefined();
  });

  it('structs and enums: a recursive tree', async () => {
    const leaf = (color: Color) => ({ color });
    const root = { leaf: leaf(Color.UNSET), children: [{ leaf: leaf(Color.RED), children: [] }, { leaf: leaf(Color.UNSET), children: [] }] };
    const r = await Trees.client(client).paint({ root, color: Color.GREEN });
    expect(r).toEqual({ painted: 3, colors: { root: Color.GREEN, 'root.0': Color.RED, 'root.1': Color.GREEN } });
  });

  it('tensors: every dtype, rank 0, fixed, symbolic, sized and any dimensions, optional tensors', async () => {
    const batch = 2;
    const l = filled([batch, 1024], 'f32', 0.25);
    const r = await Tensors.client(client).all({
      a: Tensor.zeros([], 'bool'), b: filled([5], 'u8', 9), c: filled([2, 3], 'i8', -1), d: filled([batch, 7], 'i16', 3),
      e: filled([batch], 'u16', 4), f: filled([batch, 4], 'i32', -5), g: filled([3], 'u32', 6), h: filled([3], 'i64', -7n),
      i: filled([3], 'u64', 8n), j: filled([batch, 1024], 'f16', 0x3c00), k: filled([batch, 1024], 'bf16', 0x3f80),
      l, m: filled([batch, 1024], 'f64', 0.5),
    });
    expect(r.out.equals(l)).toBe(true);
    const x = filled([1, 1024], 'f16', 0x3c00);
    expect((await Tensors.client(client).layers({ layers: [], x })).y?.equals(x)).toBe(true);
    expect((await Tensors.client(client).layers({ layers: [] })).y).toBeUndefined();
  });

  it('streaming: server streams, client streams, empty messages', async () => {
    const s = Streams.client(client);
    const counted = [];
    for await (const m of s.count({ upTo: 4 })) counted.push(m.n);
    expect(counted).toEqual([1, 2, 3, 4]);
    const rows = [filled([1, 8], 'f32', 1), filled([3, 8], 'f32', 2)];
    const summed = await s.sum(rows.map((x) => ({ x })));
    expect(summed.messages).toBe(2);
    expect([...(summed.total.toArray() as Float32Array)]).toEqual(Array(8).fill(7));
    expect(await s.ticks([{}, {}, {}])).toEqual({ n: 3 });
    const empties = [];
    for await (const m of s.empty()) empties.push(m);
    expect(empties).toEqual([{}, {}]);
  });

  it('remote: the handler pulls a @remote argument; stream items carry handles the caller pulls while the stream is open', async () => {
    const lib = Library.client(client);
    expect(await lib.store({ data: filled([4, 128], 'f16', 0x3c00), meta: { x: 7 } })).toEqual({ ok: true });
    expect(await lib.store({ data: filled([4, 128], 'f16', 0), meta: { x: 7 } })).toEqual({ ok: false });
    const ids = [];
    for await (const { page } of lib.browse({ from: 10 })) {
      const data = await page.data.pull({ into: Tensor.empty([...page.data.shape], page.data.dtype) });
      expect((data.toArray() as Uint16Array).every((v) => v === page.id)).toBe(true);
      ids.push(page.id);
    }
    expect(ids).toEqual([10, 11, 12]);
  });

  it('imports: types from another generated module, under an alias where names clash', async () => {
    const block = (cols: number) => ({ data: filled([2, cols], 'f16', 0) });
    const p = Pipeline.client(client);
    const two = [{ inner: block(4), mode: Mode.FAST }, { inner: block(4), mode: Mode.SAFE }];
    expect(await p.run({ blocks: two, first: block(4) })).toEqual({ mode: Mode.SAFE });
    expect(await p.run({ blocks: two.slice(0, 1), first: block(4) })).toEqual({ mode: Mode.FAST });
    // `cols` is the imported struct's own name: each Block value binds it anew.
    expect(await p.run({ blocks: two, first: block(5) })).toEqual({ mode: Mode.SAFE });
  });

  it('struct dims: each list element binds its own n, apart from the method\'s n', async () => {
    const route = (n: number, weights = n) => ({ tokens: filled([n], 'i64', 1n), weights: filled([weights], 'f32', 0.5) });
    const moe = Moe.client(client);
    const hidden = filled([128, 16], 'bf16', 0x3f80);
    expect(await moe.dispatch({ hidden, routes: [route(3), route(7), route(0), route(128)] })).toEqual({ counts: [3, 7, 0, 128], rows: 128 });
    // Two tensors of one Route value share its n: a disagreement is refused before anything is sent.
    await expect(moe.dispatch({ hidden, routes: [route(3), route(7, 6)] })).rejects.toMatchObject({
      code: Code.INVALID_ARGUMENT,
      message: expect.stringMatching(/arguments\.routes\[1\]\.weights: dimension 0 \(n\) is 6, but .*arguments\.routes\[1\]\.tokens dimension 0 bound n = 7/),
    });
  });

  it('docs: a documented service works like any other', async () => {
    expect(await Docs.client(client).call({ value: { value: 3 } })).toEqual({ ok: true });
  });
});
