// Gathered tag transfers (mover `g`): the equal-sized tensors of one frame share one tag message,
// both ways, between two processes over real UCX. Contents are checked element by element; the
// reports say how many tensors shared a message; a raw client that lies about a gather gets an
// error for its call and the server keeps serving with its pools back to empty.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callInfo, Client, Code, confirmedCallInfo, type Tensor, type TransferInfo } from '../../core/index.ts';
import { runtimeWith } from './fixtures/runtime-env.ts';
import { checkGathers, GATHER_MAX_COUNT, GATHER_MAX_HOST_BYTES } from '../../core/rpc/transfer/gather.ts';
import { FrameKind, type TensorWire } from '../../core/wire/frames.ts';
import { ConnectionKey, dataTag } from '../../core/wire/tag.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { RawPeer } from './fixtures/raw-peer.ts';
import { expectPoolsEmpty } from './fixtures/stats.ts';
import { patterned } from './fixtures/tensors.ts';

let server: ListeningPeer;
let client: Client;
const local = /^(y|yes|1|on)$/i.test(process.env.UCX_MM_ERROR_HANDLING ?? '') ? 'shm' : 'tcp';

beforeAll(async () => {
  server = await startServer({ poolBytes: 96 << 20, maxTensorBytes: 32 << 20 });
  client = await Client.connect(server.address, { poolBytes: 96 << 20 });
});
afterAll(async () => {
  await client?.close();
  await disposePeers();
});

/** Sends `count` tensors of `bytes` each through echoList and checks every one that comes back. */
async function echoList(count: number, bytes: number, options: { mover?: 'auto' | 'inline' | 'tag' } = {}): Promise<TransferInfo[]> {
  const xs = Array.from({ length: count }, (_, i) => patterned(bytes, i % 251));
  const result = await client.unary(EchoDescriptor.methods.echoList, { xs }, options);
  const ys = result.ys as Tensor[];
  expect(ys.length).toBe(count);
  for (const [i, y] of ys.entries()) {
    expect(y.shape).toEqual([bytes]);
    if (!y.equals(xs[i]!)) throw new Error(`ys[${i}] differs from xs[${i}]`);
    y.release();
  }
  return (await confirmedCallInfo(result))!.transfers;
}

describe('gathered tag transfers', () => {
  it('100 tensors of 8 KiB go as one message each way, contents intact, reported per tensor', async () => {
    const transfers = await echoList(100, 8192);
    expect(transfers.length).toBe(200);
    for (const info of transfers) {
      expect(info).toMatchObject({ mover: 'tag', bytes: 8192, gathered: 100, path: local });
    }
    // One description per message: the sender's own (x) and the server's report (ys), both of
    // the whole 800 KiB message.
    const sent = transfers.filter((t) => t.argument.startsWith('xs['));
    const back = transfers.filter((t) => t.argument.startsWith('ys['));
    expect(new Set(sent.map((t) => t.protocol)).size).toBe(1);
    expect(sent[0]!.protocol).toMatch(/length 819200 /);
    expect(back.every((t) => t.source === 'sender' && /length 819200 /.test(t.protocol!))).toBe(true);
  });

  it(`more than ${GATHER_MAX_COUNT} tensors are split into messages of at most ${GATHER_MAX_COUNT}`, async () => {
    const count = 2 * GATHER_MAX_COUNT + 452;
    const transfers = await echoList(count, 5000);
    const sizes = transfers.filter((t) => t.argument.startsWith('xs[')).map((t) => t.gathered);
    expect(sizes.filter((n) => n === GATHER_MAX_COUNT).length).toBe(2 * GATHER_MAX_COUNT);
    expect(sizes.filter((n) => n === 452).length).toBe(452);
  });

  it('a lone tensor, tensors above the gather size, and inline tensors move as before', async () => {
    expect((await echoList(1, 8192))[0]!.gathered).toBeUndefined();
    const big = await echoList(3, GATHER_MAX_HOST_BYTES + 1);
    expect(big.every((t) => t.mover === 'tag' && t.gathered === undefined)).toBe(true);
    const inline = await echoList(5, 8192, { mover: 'inline' });
    expect(inline.every((t) => t.mover === 'inline' && t.gathered === undefined)).toBe(true);
    const small = await echoList(5, 100);
    expect(small.every((t) => t.mover === 'inline')).toBe(true);
  });

  it('GDRPC_GATHER=0 in one process turns gathering off both ways', async () => {
    const runtime = runtimeWith({ GDRPC_GATHER: '0' });
    const plain = await Client.connect(server.address, { runtime, poolBytes: 16 << 20 });
    try {
      const xs = Array.from({ length: 10 }, (_, i) => patterned(8192, i));
      const result = await plain.unary(EchoDescriptor.methods.echoList, { xs });
      const ys = result.ys as Tensor[];
      for (const [i, y] of ys.entries()) expect(y.equals(xs[i]!)).toBe(true);
      for (const y of ys) y.release();
      expect(callInfo(result)!.transfers.map((t) => [t.mover, t.gathered])).toEqual(Array(20).fill(['tag', undefined]));
    } finally {
      await plain.close();
      await runtime.close();
    }
  });

  it('leaves the server\'s pools empty', async () => {
    await echoList(300, 8192);
    await expectPoolsEmpty(client);
  });
});

describe('checkGathers', () => {
  const member = (x: number, f: number, n = 16): { where: string; wire: TensorWire } => ({ where: `xs[${f / n}]`, wire: { dt: 'u8', sh: [n], n, mt: 'host', m: 'g', x, f } });

  // Linear in the frame's descriptors: a frame of 100,000 (about 4 MB) is read in well under the
  // test's time limit, and one gather of them is refused at its 1,025th member.
  it('reads a frame of 100,000 gathered descriptors at once, and refuses a gather past 1,024 members', () => {
    const spread = Array.from({ length: 100_000 }, (_, i) => member(Math.floor(i / 1000), (i % 1000) * 16));
    const gathers = checkGathers(spread, 1 << 30, 'M.m arguments.');
    expect(gathers.length).toBe(100);
    expect(gathers.every((g) => g.members.length === 1000 && g.members.every((p, k) => p.wire.f === k * 16))).toBe(true);
    const one = Array.from({ length: 100_000 }, (_, i) => member(5, i * 16));
    expect(() => checkGathers(one, 1 << 30, 'M.m arguments.')).toThrow(/gathered transfer 5 has more than 1024 tensors/);
  });
});

describe('a raw client lying about a gather', () => {
  const BYTES = 5000;
  const gathered = (x: number, offsets: number[], n = BYTES): Array<Record<string, unknown>> =>
    offsets.map((f) => ({ dt: 'u8', sh: [n], n, mt: 'host', m: 'g', x, f }));

  async function admitted(gat: boolean): Promise<RawPeer> {
    const raw = await RawPeer.connect(server.port);
    await raw.sendBody(FrameKind.Auth, 0, gat ? { key: raw.key.value, win: 8 << 20, gat: true } : { key: raw.key.value, win: 8 << 20 });
    expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
    return raw;
  }

  const lies: Array<[string, Array<Record<string, unknown>>, number, string, RegExp]> = [
    ['two tensors at one offset', gathered(7, [0, 0]), 2 * BYTES, Code.INVALID_ARGUMENT, /offsets other than 0, 5000/],
    ['an offset off the grid', gathered(7, [0, 4999]), 2 * BYTES, Code.INVALID_ARGUMENT, /offsets other than/],
    ['a gap', gathered(7, [0, 2 * BYTES]), 3 * BYTES, Code.INVALID_ARGUMENT, /offsets other than/],
    ['a payload shorter than the gather', gathered(7, [0, BYTES]), 2 * BYTES - 1000, Code.INVALID_ARGUMENT, /payload of 9000 bytes, descriptor said 10000/],
    ['a payload longer than the gather', gathered(7, [0, BYTES]), 2 * BYTES + 1000, Code.INVALID_ARGUMENT, /truncated/],
    ['more tensors than a gather may hold', gathered(7, Array.from({ length: GATHER_MAX_COUNT + 1 }, (_, k) => k * BYTES)), 0, Code.INVALID_ARGUMENT, /has more than 1024 tensors/],
    ['a tensor bytes message shared by a gather and a single transfer', [...gathered(7, [0, BYTES]), { dt: 'u8', sh: [BYTES], n: BYTES, mt: 'host', m: 't', x: 7 }], 2 * BYTES, Code.INVALID_ARGUMENT, /shares its id with a tag transfer/],
    ['a gather over the server\'s largest tensor', gathered(7, Array.from({ length: 8 }, (_, k) => k * (5 << 20)), 5 << 20), 0, Code.RESOURCE_EXHAUSTED, /exceeds the limit/],
  ];
  for (const [name, xs, payload, code, message] of lies) {
    it(`${name}: ${code} for the call, nothing held`, async () => {
      const raw = await admitted(true);
      try {
        const body = { svc: EchoDescriptor.name, m: 'echoList', a: { xs } };
        await raw.sendBody(FrameKind.Request, 3, body);
        if (payload > 0) await raw.endpoint.tagSend(dataTag(new ConnectionKey(raw.serverKey), 7), new Uint8Array(payload).fill(3));
        const answer = await raw.receive(10_000);
        expect(answer?.kind).toBe(FrameKind.Error);
        expect(answer?.body.code).toBe(code);
        expect(answer?.body.msg).toMatch(message);
        expect((await client.unary(EchoDescriptor.methods.ping, { n: 9 })).n).toBe(9);
        await expectPoolsEmpty(client);
      } finally {
        await raw.close();
      }
    });
  }

  it('a server with GDRPC_GATHER=0 refuses gathered tensors: INVALID_ARGUMENT, and keeps serving', async () => {
    const plain = await startServer({ poolBytes: 8 << 20 }, { GDRPC_GATHER: '0' });
    const raw = await RawPeer.connect(plain.port);
    try {
      expect(raw.hello?.gat).toBeUndefined();
      await raw.sendBody(FrameKind.Auth, 0, { key: raw.key.value, win: 8 << 20, gat: true });
      expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
      await raw.sendBody(FrameKind.Request, 3, { svc: EchoDescriptor.name, m: 'echoList', a: { xs: gathered(9, [0, BYTES]) } });
      const answer = await raw.receive(10_000);
      expect(answer?.kind).toBe(FrameKind.Error);
      expect(answer?.body.code).toBe(Code.INVALID_ARGUMENT);
      expect(answer?.body.msg).toMatch(/did not announce gathers/);
      await raw.sendBody(FrameKind.Request, 4, { svc: EchoDescriptor.name, m: 'ping', a: { n: 2 } });
      expect((await raw.receive())?.body.r).toEqual({ n: 2 });
    } finally {
      await raw.close();
      plain.kill();
    }
  });

  it('a client that did not announce gat gets its results one message per tensor', async () => {
    for (const gat of [false, true]) {
      const raw = await admitted(gat);
      try {
        // Two tensors each sent on their own (mover t): the server answers with its own descriptors.
        const xs = [0, 1].map((k) => ({ dt: 'u8', sh: [BYTES], n: BYTES, mt: 'host', m: 't', x: 20 + k }));
        await raw.sendBody(FrameKind.Request, 5, { svc: EchoDescriptor.name, m: 'echoList', a: { xs } });
        for (const k of [0, 1]) await raw.endpoint.tagSend(dataTag(new ConnectionKey(raw.serverKey), 20 + k), new Uint8Array(BYTES).fill(k));
        const answer = await raw.receive(10_000);
        expect(answer?.kind).toBe(FrameKind.Response);
        const ys = (answer!.body.r as { ys: Array<{ m: string; x: number; f?: number }> }).ys;
        expect(ys.map((y) => y.m)).toEqual(gat ? ['g', 'g'] : ['t', 't']);
        if (gat) {
          expect(ys[0]!.x).toBe(ys[1]!.x);
          expect(ys.map((y) => y.f)).toEqual([0, BYTES]);
        }
      } finally {
        await raw.close();
      }
    }
    await expectPoolsEmpty(client);
  });
});
