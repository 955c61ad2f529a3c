// Frames no well-behaved client sends, from a raw peer: each gets an error or a disconnect, and
// the server keeps serving its other clients throughout.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Packr } from 'msgpackr';
import { Client, Code, Tensor } from '../../core/index.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { ConnectionKey, dataTag } from '../../core/wire/tag.ts';
import { MAX_MESSAGE_FRAMES, packMessage } from '../../core/wire/message.ts';
import { MAX_MALFORMED_FRAMES } from '../../core/rpc/connection/inbound.ts';
import { MAX_TENSORS_PER_FRAME } from '../../core/wire/frames.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { startServer, type ListeningPeer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { RawPeer } from './fixtures/raw-peer.ts';
import { expectPoolsEmpty, serverStats } from './fixtures/stats.ts';

let server: ListeningPeer;
let good: Client;
const packr = new Packr({ useRecords: false });
const echoRequest = (x: Record<string, unknown>) => ({ svc: EchoDescriptor.name, m: 'echo', a: { x, tag: 'raw' } });

/** `depth` msgpack arrays of one element each, nil innermost: what a decoder must recurse through. */
function nested(depth: number): Uint8Array {
  const bytes = new Uint8Array(depth + 1).fill(0x91);
  bytes[depth] = 0xc0;
  return bytes;
}

/** A ping REQUEST whose argument `n` is `depth` arrays deep (spliced in where a marker number packed). */
function deepPing(depth: number): Uint8Array {
  const marker = 0x7fffff01;
  const body = packr.pack({ v: 2, svc: EchoDescriptor.name, m: 'ping', a: { n: marker } });
  const at = body.findIndex((b, i) => b === 0xce && body.readUInt32BE(i + 1) === marker);
  return Buffer.concat([body.subarray(0, at), nested(depth), body.subarray(at + 5)]);
}

beforeAll(async () => {
  server = await startServer({ maxFrameBytes: 64 * 1024, maxTensorBytes: 1 << 20, poolBytes: 4 << 20 });
  good = await Client.connect(server.address);
});
afterAll(async () => {
  await good?.close();
  await disposePeers();
});

async function admittedRaw(): Promise<RawPeer> {
  const raw = await RawPeer.connect(server.port);
  await raw.auth();
  const ready = await raw.receive();
  expect(ready?.kind).toBe(FrameKind.Ready);
  return raw;
}

async function stillServing(): Promise<void> {
  expect((await good.unary(EchoDescriptor.methods.ping, { n: 5 })).n).toBe(5);
}

describe('malformed input', () => {
  const callErrors: Array<[string, (raw: RawPeer) => Promise<void>, string]> = [
    ['bytes that are not msgpack', (raw) => raw.sendBytes(FrameKind.Request, 3, new Uint8Array([0xc1, 0xff, 0x00])), Code.INVALID_ARGUMENT],
    ['a map without the method', (raw) => raw.sendBody(FrameKind.Request, 3, { a: {} }), Code.INVALID_ARGUMENT],
    ['another wire version', (raw) => raw.sendBytes(FrameKind.Request, 3, packr.pack({ v: 99, svc: EchoDescriptor.name, m: 'ping', a: { n: 1 } })), Code.INVALID_ARGUMENT],
    ['a tensor whose bytes do not match its shape', (raw) => raw.sendBody(FrameKind.Request, 3, echoRequest({ dt: 'u8', sh: [8], n: 4, mt: 'host', m: 'i', b: new Uint8Array(4) })), Code.INVALID_ARGUMENT],
    ['an unknown dtype', (raw) => raw.sendBody(FrameKind.Request, 3, echoRequest({ dt: 'q7', sh: [4], n: 4, mt: 'host', m: 'i', b: new Uint8Array(4) })), Code.INVALID_ARGUMENT],
    ['a scalar of the wrong type', (raw) => raw.sendBody(FrameKind.Request, 3, { svc: EchoDescriptor.name, m: 'ping', a: { n: 'seven' } }), Code.INVALID_ARGUMENT],
    ['a huge tag tensor (limit before allocation)', (raw) => raw.sendBody(FrameKind.Request, 3, echoRequest({ dt: 'u8', sh: [2 ** 40], n: 2 ** 40, mt: 'host', m: 't', x: 5 })), Code.RESOURCE_EXHAUSTED],
    ['an unknown mover in the REQUEST', (raw) => raw.sendBody(FrameKind.Request, 3, { svc: EchoDescriptor.name, m: 'ping', a: { n: 1 }, mv: 'teleport' }), Code.INVALID_ARGUMENT],
    ['a noStaging that is not a boolean', (raw) => raw.sendBody(FrameKind.Request, 3, { svc: EchoDescriptor.name, m: 'ping', a: { n: 1 }, ns: 1 }), Code.INVALID_ARGUMENT],
    // Past the decoder's stack: msgpackr's RangeError is a malformed frame, not a crash.
    ['msgpack nested 60,000 arrays deep', (raw) => raw.sendBytes(FrameKind.Request, 3, nested(60_000)), Code.INVALID_ARGUMENT],
    // Within it: decoded, then refused (its payloads looked for through every level) as a bad argument.
    ['an argument nested 3,000 arrays deep', (raw) => raw.sendBytes(FrameKind.Request, 3, deepPing(3_000)), Code.INVALID_ARGUMENT],
    // A payload tag carries 32 bits of it: x + 2^32 would name x's payload.
    ['a tag tensor whose transfer id is past 32 bits', (raw) => raw.sendBody(FrameKind.Request, 3, echoRequest({ dt: 'u8', sh: [4], n: 4, mt: 'host', m: 't', x: 2 ** 32 + 5 })), Code.INVALID_ARGUMENT],
    ['a frame over the frame limit', (raw) => raw.sendBody(FrameKind.Request, 3, { svc: EchoDescriptor.name, m: 'ping', a: { n: 1 }, pad: new Uint8Array(100 * 1024) }), Code.RESOURCE_EXHAUSTED],
  ];
  for (const [name, send, code] of callErrors) {
    it(`${name}: ERROR ${code} for the call`, async () => {
      const raw = await admittedRaw();
      try {
        await send(raw);
        const frame = await raw.receive();
        expect(frame?.kind).toBe(FrameKind.Error);
        expect(frame?.call).toBe(3);
        expect(frame?.body.code).toBe(code);
        await stillServing();
      } finally {
        await raw.close();
      }
    });
  }

  it('an unknown frame kind gets ERROR and a disconnect', async () => {
    const raw = await admittedRaw();
    try {
      await raw.sendBody(99, 0, {});
      const frames = await raw.drain(500);
      expect(frames[0]?.kind).toBe(FrameKind.Error);
      await stillServing();
    } finally {
      await raw.close();
    }
  });

  it('tensor bytes nobody asked for, and frames for other connections, change nothing', async () => {
    const raw = await admittedRaw();
    try {
      await raw.endpoint.tagSend(dataTag(new ConnectionKey(raw.serverKey), 12345), new Uint8Array(1000));
      await raw.endpoint.tagSend(dataTag(new ConnectionKey(0xabcdef_00000000n), 1), new Uint8Array(10));
      await stillServing();
      await raw.sendBody(FrameKind.Request, 4, { svc: EchoDescriptor.name, m: 'ping', a: { n: 8 } });
      const frame = await raw.receive();
      expect(frame?.kind).toBe(FrameKind.Response);
      expect(frame?.body.r).toEqual({ n: 8 });
    } finally {
      await raw.close();
    }
  });

  it('frames of one message are handled in order; a malformed message is refused whole', async () => {
    const raw = await admittedRaw();
    try {
      const frame = (call: number, n: number) => ({ kind: FrameKind.Request, call, body: packr.pack({ v: 2, svc: EchoDescriptor.name, m: 'ping', a: { n } }) });
      await raw.sendMessage(packMessage([frame(21, 1), frame(22, 2)]));
      const answers = [await raw.receive(), await raw.receive()];
      expect(answers.map((f) => [f?.kind, f?.call, (f?.body.r as { n: number } | undefined)?.n])).toEqual([[FrameKind.Response, 21, 1], [FrameKind.Response, 22, 2]]);
      const truncated = packMessage([frame(23, 3)]).subarray(0, 12);
      await raw.sendMessage(truncated);
      const frames = await raw.drain(500);
      expect(frames.some((f) => f.kind === FrameKind.Response)).toBe(false);
      await stillServing();
    } finally {
      await raw.close();
    }
  });

  const notMsgpack = (call: number) => ({ kind: FrameKind.Request, call, body: new Uint8Array([0xc1]) });
  const ping = (call: number) => ({ kind: FrameKind.Request, call, body: packr.pack({ v: 2, svc: EchoDescriptor.name, m: 'ping', a: { n: call } }) });

  it("a control message longer than the server's receive buffer gets ERROR RESOURCE_EXHAUSTED on call 0 and a disconnect", async () => {
    const raw = await admittedRaw();
    try {
      // 5 MiB against the runtime's 4 MiB buffer: UCX truncates it unread, and says whose it was.
      // Its bytes are lost, so it weighs as one frame; past the opening window, it takes a loan.
      await raw.borrow((5 << 20) + 1024);
      await raw.sendMessage(new Uint8Array(5 << 20));
      const frame = await raw.receive(10_000);
      expect([frame?.kind, frame?.call, frame?.body.code]).toEqual([FrameKind.Error, 0, Code.RESOURCE_EXHAUSTED]);
      expect(String(frame?.body.msg)).toMatch(/message of 5242880 bytes exceeds the \d+-byte frame limit/);
      expect(await raw.closedWithin(10_000)).toBe('closed');
      await stillServing();
    } finally {
      await raw.close();
    }
  });

  it('a REQUEST on call id 0 (reserved for the connection) gets ERROR on call 0 and a disconnect', async () => {
    const raw = await admittedRaw();
    try {
      await raw.sendMessage(packMessage([ping(0)]));
      const frame = await raw.receive();
      expect([frame?.kind, frame?.call, frame?.body.code]).toEqual([FrameKind.Error, 0, Code.INVALID_ARGUMENT]);
      expect(await raw.closedWithin(10_000)).toBe('closed');
      await stillServing();
    } finally {
      await raw.close();
    }
  });

  it(`${MAX_MALFORMED_FRAMES} malformed frames in one message each get their ERROR, and a well-formed frame after them is served`, async () => {
    const raw = await admittedRaw();
    try {
      const calls = Array.from({ length: MAX_MALFORMED_FRAMES }, (_, i) => 200 + i);
      await raw.sendMessage(packMessage([...calls.map(notMsgpack), ping(300)]));
      const frames = await raw.drain(500);
      expect(frames.filter((f) => f.kind === FrameKind.Error).map((f) => [f.call, f.body.code])).toEqual(calls.map((call) => [call, Code.INVALID_ARGUMENT]));
      expect(frames.find((f) => f.call === 300)?.body.r).toEqual({ n: 300 });
      await raw.sendMessage(packMessage([ping(301)]));
      expect((await raw.receive())?.body.r).toEqual({ n: 301 });
    } finally {
      await raw.close();
    }
  });

  // One 4 KiB message of 9-byte frames would otherwise cost about 450 ERROR frames and 'error' events.
  // [what, the message, the calls answered one by one, the refusal's text]
  const floods: Array<[string, () => ReturnType<typeof packMessage>, number[], RegExp]> = [
    ['malformed frames', () => packMessage(Array.from({ length: 200 }, (_, i) => notMsgpack(400 + i))),
      Array.from({ length: MAX_MALFORMED_FRAMES }, (_, i) => 400 + i), /more than 16 malformed frames in one message/],
    ['frames in a message over the frame limit', () => packMessage(Array.from({ length: 20 }, (_, i) => ({ kind: FrameKind.Request, call: 400 + i, body: new Uint8Array(4096) }))),
      [], /more than 16 frames in a message over the frame limit/],
    // Well-formed, but of a kind a client never sends: each would be an ERROR and an 'error' event.
    ['frames of a kind a client never sends', () => packMessage(Array.from({ length: 200 }, (_, i) => ({ kind: FrameKind.GoAway, call: 400 + i, body: packr.pack({ v: 2 }) }))),
      Array.from({ length: MAX_MALFORMED_FRAMES }, (_, i) => 400 + i), /more than 16 malformed frames in one message/],
  ];
  it.each(floods)('more than 16 %s in one message: the connection is refused as a whole with one ERROR, no ERROR per frame past the 16th, and the server serves on', async (_, message, answered, text) => {
    const raw = await admittedRaw();
    try {
      await raw.sendMessage(message());
      // What follows the refusal, before the connection closes, is not answered.
      await raw.sendMessage(packMessage([notMsgpack(2000), notMsgpack(2001)]));
      const frames = await raw.drain(1000);
      const errors = frames.filter((f) => f.kind === FrameKind.Error);
      expect(errors.filter((f) => f.call !== 0).map((f) => f.call)).toEqual(answered);
      const refusals = errors.filter((f) => f.call === 0);
      expect(refusals.length).toBe(1);
      expect(refusals[0]!.body.code).toBe(Code.INVALID_ARGUMENT);
      expect(String(refusals[0]!.body.msg)).toMatch(text);
      await stillServing();
      expect(server.child.exitCode).toBeNull();
    } finally {
      await raw.close();
    }
  });

  // A message's frames are read in one turn of the event loop: 4 MiB of frames that need no answer
  // (167,000-280,000 of them) held it 113-198 ms (scratch). gdrpc sends 16 at most.
  it(`a message of more than ${MAX_MESSAGE_FRAMES} frames is refused as a whole (one ERROR on call 0, a disconnect, none of its frames read); ${MAX_MESSAGE_FRAMES} are read`, async () => {
    const keepalive = { kind: FrameKind.Keepalive, call: 0, body: packr.pack({ v: 2 }) };
    const raw = await admittedRaw();
    try {
      // Each weighs more than the server's opening window (1 KiB a frame): a loan first, each.
      await raw.sendBorrowing(packMessage([...Array.from({ length: MAX_MESSAGE_FRAMES - 1 }, () => keepalive), ping(500)]));
      expect((await raw.receive())?.body.r).toEqual({ n: 500 });
      await raw.sendBorrowing(packMessage([...Array.from({ length: MAX_MESSAGE_FRAMES }, () => keepalive), ping(501)]));
      const frames = await raw.drain(1000);
      expect(frames.map((f) => [f.kind, f.call, f.body.code])).toEqual([[FrameKind.Error, 0, Code.INVALID_ARGUMENT]]);
      expect(String(frames[0]!.body.msg)).toMatch(`more than ${MAX_MESSAGE_FRAMES} frames in one message`);
      expect(await raw.closedWithin(10_000)).toBe('closed');
      await stillServing();
    } finally {
      await raw.close();
    }
  });

  it.each([[1, MAX_TENSORS_PER_FRAME + 1000], [2, 9000]])(`%i frame(s) for no running call announcing %i tensors each (more than ${MAX_TENSORS_PER_FRAME} in all) close the connection instead of a receive posted for each`, async (frames, perFrame) => {
    // The 64 KiB frame limit of this file's server already refuses such a frame: a server with
    // the default 4 MiB one.
    const wide = await startServer({});
    const raw = await RawPeer.connect(wide.port);
    try {
      await raw.auth();
      expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
      const item = (k: number) => {
        const xs = Array.from({ length: perFrame }, (_, i) => ({ dt: 'u8', sh: [1], n: 1, mt: 'host', m: 't', x: k * perFrame + i + 1 }));
        return { kind: FrameKind.StreamItem, call: 77 + k, body: packr.pack({ v: 2, seq: 0, a: { xs } }) };
      };
      await raw.sendMessage(packMessage(Array.from({ length: frames }, (_, k) => item(k))));
      // Closed at once (with a receive posted for each, it would stay open until the 30 s
      // transfer timeout).
      expect(await raw.closedWithin(10_000)).toBe('closed');
      const other = await Client.connect(wide.address);
      expect((await other.unary(EchoDescriptor.methods.ping, { n: 9 })).n).toBe(9);
      await other.close();
      expect(wide.child.exitCode).toBeNull();
    } finally {
      await raw.close();
    }
  });

  it(`a client refuses to send more than ${MAX_TENSORS_PER_FRAME} tensors in one frame (RESOURCE_EXHAUSTED, nothing sent)`, async () => {
    const x = Tensor.empty([4], 'u8');
    try {
      const xs = Array.from({ length: MAX_TENSORS_PER_FRAME + 1 }, () => x);
      await expect(good.unary(EchoDescriptor.methods.echoList, { xs })).rejects.toMatchObject({ code: Code.RESOURCE_EXHAUSTED });
      await stillServing();
    } finally {
      x.release();
    }
  });

  it('the answers of one turn leave in messages of at most 16 frames, in order (the peer starts on the first while the rest are made)', async () => {
    const raw = await admittedRaw();
    try {
      const calls = Array.from({ length: 40 }, (_, i) => 100 + i);
      await raw.sendMessage(packMessage(calls.map((call) => ({ kind: FrameKind.Request, call, body: packr.pack({ v: 2, svc: EchoDescriptor.name, m: 'ping', a: { n: call } }) }))));
      const read = raw.messageSizes.length;
      const answers: Array<[number | undefined, number | undefined]> = [];
      for (const _ of calls) {
        const f = await raw.receive();
        answers.push([f?.call, (f?.body.r as { n: number } | undefined)?.n]);
      }
      expect(answers).toEqual(calls.map((call) => [call, call]));
      const sizes = raw.messageSizes.slice(read);
      expect(sizes.reduce((a, b) => a + b, 0)).toBe(40);
      // The handlers answer within one turn: the first message is full, none is larger.
      expect(sizes[0]).toBe(16);
      expect(Math.max(...sizes)).toBe(16);
    } finally {
      await raw.close();
    }
  });

  it('a stream item behind a frame that failed its client-streaming call is dropped (found by the fuzzer: it crashed the server)', async () => {
    const raw = await admittedRaw();
    try {
      const item = { kind: FrameKind.StreamItem, call: 5, body: packr.pack({ v: 2, seq: 0, a: { x: { dt: 'u8', sh: [4], n: 4, mt: 'host', m: 'i', b: new Uint8Array(4) } } }) };
      await raw.sendMessage(packMessage([
        { kind: FrameKind.Request, call: 5, body: packr.pack({ v: 2, svc: EchoDescriptor.name, m: 'sum' }) },
        { kind: FrameKind.StreamEnd, call: 5, body: new Uint8Array([0x81, 0xa1, 0x76, 0x02, 0x00]) },
        item, item,
      ]));
      const frames = await raw.drain(500);
      expect(frames.some((f) => f.kind === FrameKind.Error && f.call === 5 && f.body.code === Code.INVALID_ARGUMENT)).toBe(true);
      expect(server.child.exitCode).toBeNull();
      await stillServing();
    } finally {
      await raw.close();
    }
  });

  it('after all of it the server has nothing allocated and still serves', async () => {
    await stillServing();
    await expectPoolsEmpty(good);
    expect((await serverStats(good)).activeCalls).toBe(1);
  });
});
