// A peer holding a remote handle asks its owner for more than one pull of it (gdrpc.Owner, raw
// frames): a handle is pulled once, by one call at a time. Every pull asked before the first
// one's bytes had left used to be served: a peer that never took the bytes made one 1 MiB handle
// announce hundreds of thousands of transfers (409,600 from 400 pullMany calls: +1.75 GiB and an
// honest ping of 6.35 s on the owner, scratch, CPU box).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Code, Tensor } from '../../core/index.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { packMessage } from '../../core/wire/message.ts';
import { Packr } from 'msgpackr';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { inProcessEcho, type InProcessEcho } from '../rpc/fixtures/in-process.ts';
import { RawPeer, type RawFrame } from '../rpc/fixtures/raw-peer.ts';

const packr = new Packr({ useRecords: false });
const OWNER = 'gdrpc.Owner';
let echo: InProcessEcho;

beforeAll(async () => {
  // 1 MiB regions: rendezvous sends, whose bytes leave only when the peer takes them (it never does).
  echo = await inProcessEcho({
    region: (args: { rows: number; cols: number }) => ({ h: Tensor.zeros([args.rows, args.cols], 'u16') }),
  });
});
afterAll(async () => {
  await echo?.close();
});

/** An admitted raw peer and a fresh handle of `rows` KiB x 2 the owner gave it (1 MiB by default). */
async function handleFor(rows = 512): Promise<{ raw: RawPeer; h: { x: number; s: Uint8Array } }> {
  const raw = await RawPeer.connect(echo.server.address!.port);
  await raw.auth();
  expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
  await raw.sendBody(FrameKind.Request, 1, { svc: EchoDescriptor.name, m: 'region', a: { rows, cols: 1024 } });
  const answer = await raw.receive();
  expect(answer).toMatchObject({ kind: FrameKind.Response, call: 1 });
  return { raw, h: (answer!.body.r as { h: { x: number; s: Uint8Array } }).h };
}

/** The answers to calls `ids`, until none came for a while. */
async function answers(raw: RawPeer, ids: number[]): Promise<RawFrame[]> {
  return (await raw.drain(1000)).filter((f) => ids.includes(f.call));
}

const request = (call: number, m: string, a: Record<string, unknown>) => ({ kind: FrameKind.Request, call, body: packr.pack({ v: 2, svc: OWNER, m, a }) });

describe('a remote handle is pulled once', () => {
  it('eight pulls of one handle in one message: one is answered, seven are NOT_FOUND', async () => {
    const { raw, h } = await handleFor();
    try {
      const ids = Array.from({ length: 8 }, (_, i) => 10 + i);
      await raw.sendMessage(packMessage(ids.map((id) => request(id, 'pull', { x: h.x, s: h.s }))));
      const frames = await answers(raw, ids);
      expect(frames.filter((f) => f.kind === FrameKind.Response).map((f) => f.call)).toEqual([10]);
      const refused = frames.filter((f) => f.kind === FrameKind.Error);
      expect(refused.map((f) => [f.call, f.body.code])).toEqual(ids.slice(1).map((id) => [id, Code.NOT_FOUND]));
      expect(String(refused[0]!.body.msg)).toMatch(/being pulled by another call/);
    } finally {
      await raw.close();
    }
  });

  it.each(['pullMany', 'pullStacked'])('%s asking for one handle twice is INVALID_ARGUMENT, and leaves it pullable', async (method) => {
    const { raw, h } = await handleFor();
    try {
      await raw.sendMessage(packMessage([request(20, method, { xs: [h.x, h.x], ss: [h.s, h.s] })]));
      const [refusal] = await answers(raw, [20]);
      expect([refusal?.kind, refusal?.body.code]).toEqual([FrameKind.Error, Code.INVALID_ARGUMENT]);
      expect(String(refusal?.body.msg)).toMatch(/asked for twice/);
      await raw.sendMessage(packMessage([request(21, 'pull', { x: h.x, s: h.s })]));
      expect((await answers(raw, [21])).map((f) => f.kind)).toEqual([FrameKind.Response]);
    } finally {
      await raw.close();
    }
  });

  // Refused after its handles were claimed: over pullStacked's 1 MiB a handle, or a capability
  // that does not match (the first handle was claimed by then).
  it.each([['a handle over its size', 1024, Code.INVALID_ARGUMENT], ['a wrong capability for its second handle', 512, Code.NOT_FOUND]] as const)('a pullStacked refused for %s leaves its handles pullable', async (_, rows, code) => {
    const { raw, h } = await handleFor(rows);
    try {
      const second = { kind: FrameKind.Request, call: 1, body: packr.pack({ v: 2, svc: EchoDescriptor.name, m: 'region', a: { rows, cols: 1024 } }) };
      await raw.sendMessage(packMessage([second]));
      const other = (await raw.receive())!.body.r as { h: { x: number; s: Uint8Array } };
      const ss = code === Code.NOT_FOUND ? [h.s, h.s] : [h.s, other.h.s];
      await raw.sendMessage(packMessage([request(30, 'pullStacked', { xs: [h.x, other.h.x], ss })]));
      const [refusal] = await answers(raw, [30]);
      expect([refusal?.kind, refusal?.body.code]).toEqual([FrameKind.Error, code]);
      await raw.sendMessage(packMessage([request(31, 'pull', { x: h.x, s: h.s }), request(32, 'pull', { x: other.h.x, s: other.h.s })]));
      expect((await answers(raw, [31, 32])).map((f) => [f.call, f.kind])).toEqual([[31, FrameKind.Response], [32, FrameKind.Response]]);
    } finally {
      await raw.close();
    }
  });
});

// A rendezvous send holds the memory it reads until the peer takes the bytes: a peer that never did
// held the pulled tensor, or an owner's gather staging, for as long as it stayed connected (four
// such connections held an owner's 2 GiB of staging, scratch). Past transferTimeoutMs the owner
// closes the connection, as it does for bytes it awaits.
describe('bytes a peer never takes', () => {
  it.each(['pull', 'pullBlocks'])('the owner closes a connection that has not taken a %s answer within transferTimeoutMs', async (method) => {
    const slow = await inProcessEcho({
      region: (args: { rows: number; cols: number }) => ({ h: Tensor.zeros([args.rows, args.cols], 'u16') }),
    }, { server: { transferTimeoutMs: 500 } });
    const raw = await RawPeer.connect(slow.server.address!.port);
    try {
      await raw.auth();
      expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
      raw.keepAlive(100);
      await raw.sendBody(FrameKind.Request, 1, { svc: EchoDescriptor.name, m: 'region', a: { rows: 512, cols: 1024 } });
      const h = ((await raw.receive())!.body.r as { h: { x: number; s: Uint8Array } }).h;
      const index = new Uint8Array(4);
      // 1 MiB either way: a rendezvous send (a small one leaves eagerly whether or not the peer takes it).
      const a = method === 'pull' ? { x: h.x, s: h.s } : { x: h.x, s: h.s, b: 1 << 20, r: index };
      await raw.sendMessage(packMessage([request(2, method, a)]));
      expect((await raw.receive())).toMatchObject({ kind: FrameKind.Response, call: 2 });
      expect(await raw.closedWithin(10_000)).toBe('closed');
    } finally {
      await raw.close();
      await slow.close();
    }
  });
});
