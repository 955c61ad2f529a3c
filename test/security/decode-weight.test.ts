// What a peer's frames may make this side hold in heap once decoded (core/wire/plain.ts weighs
// a body before msgpackr decodes it; core/rpc/call/stream.ts bounds a stream's untaken items by
// what they weigh). A helper session playing a hostile server (2026-12-07) sent a client stream
// items of millions of empty byte strings, each 4 MiB frame 611 MiB of heap, and took the client
// to V8's heap limit while its caller was slow to take them; a frame may still decode to about 24
// times its bytes, so the items a stream holds are weighed together too.
import { afterAll, describe, expect, it } from 'vitest';
import { Packr } from 'msgpackr';
import { Client, Code, type GdrpcError } from '../../core/index.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { packMessage } from '../../core/wire/message.ts';
import { messageWeight } from '../../core/rpc/connection/window-frames.ts';
import { MAX_UNTAKEN_WEIGHT } from '../../core/rpc/call/stream.ts';
import type { MethodDescriptor } from '../../core/schema/descriptor.ts';
import { RawServer } from '../rpc/fixtures/raw-server.ts';
import { RawPeer } from '../rpc/fixtures/raw-peer.ts';
import { inProcessEcho } from '../rpc/fixtures/in-process.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';

const packr = new Packr({ useRecords: false });
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const closers: Array<() => Promise<unknown>> = [];
afterAll(async () => { for (const close of closers.reverse()) await close().catch(() => {}); });

/** A raw server keeping to the client's message window: CREDITs on call 0 acknowledged and
 *  counted, each send waiting until the window takes it. */
class WindowedServer {
  room: number;
  readonly requests: number[] = [];
  #stopped = false;
  readonly #keepalive: NodeJS.Timeout;

  constructor(readonly raw: RawServer) {
    this.room = Number(raw.auth!.win) - 4096;
    void this.#read();
    this.#keepalive = setInterval(() => {
      this.room -= 1100;
      void raw.sendMessage(packMessage([{ kind: FrameKind.Keepalive, call: 0, body: packr.pack({ v: 2 }) }])).catch(() => {});
    }, 1000);
  }

  async #read(): Promise<void> {
    while (!this.#stopped) {
      const message = await this.raw.receiveMessage(200);
      for (const f of message?.frames ?? []) {
        if (f.kind === FrameKind.Credit && f.call === 0) {
          await this.raw.sendMessage(packMessage([{ kind: FrameKind.Ack, call: 0, body: packr.pack({ v: 2, id: f.body.id }) }])).catch(() => {});
          this.room += Number(f.body.n);
        } else if (f.kind === FrameKind.Request) {
          this.requests.push(f.call);
        }
      }
    }
  }

  async request(): Promise<number> {
    for (let i = 0; i < 1000 && this.requests.length === 0; i += 1) await sleep(5);
    return this.requests.shift()!;
  }

  /** Sends `message` once the window takes it; false if it did not within 10 s. */
  async send(message: Uint8Array): Promise<boolean> {
    const weight = messageWeight(message, message.length);
    for (let waited = 0; this.room < weight; waited += 5) {
      if (waited > 10_000) return false;
      await sleep(5);
    }
    this.room -= weight;
    await this.raw.sendMessage(message);
    return true;
  }

  stop(): void {
    this.#stopped = true;
    clearInterval(this.#keepalive);
  }
}

/** A client admitted by a raw server that keeps to its window; both closed after the file. */
async function clientOfRawServer(): Promise<{ client: Client; server: WindowedServer }> {
  const raw = RawServer.listen();
  closers.push(() => raw.close());
  const connecting = Client.connect(raw.address);
  await raw.admit();
  const client = await connecting;
  closers.push(() => client.close());
  const server = new WindowedServer(raw);
  closers.push(async () => server.stop());
  return { client, server };
}

/** A STREAM_ITEM body {seq, a: {bs: [<count> byte strings of `each` bytes]}}, about 4 MiB. */
function itemOf(seq: number, each: number): Uint8Array {
  const count = Math.floor((4 * 1024 * 1024 - 8192) / (2 + each));
  return packr.pack({ v: 2, seq, a: { bs: Array.from({ length: count }, () => new Uint8Array(each)) } });
}

describe('what decoded frames may hold', () => {
  it(`a server stream whose untaken items would weigh more than ${MAX_UNTAKEN_WEIGHT} bytes fails RESOURCE_EXHAUSTED, the items refused, while the caller is slow to take them`, async () => {
    const { client, server } = await clientOfRawServer();
    const method = { service: 'x.Blob', name: 'get', clientStreaming: false, serverStreaming: true, args: [], results: [{ name: 'bs', type: { kind: 'list', element: { kind: 'scalar', name: 'bytes' } } }] } as unknown as MethodDescriptor;
    const stream = client.serverStream(method, {}, { deadline: 60_000 })[Symbol.asyncIterator]();
    const first = stream.next();
    const id = await server.request();
    // Byte strings of 16 bytes: about 15 times their bytes in weight, under a frame's own cap
    // (24 a byte), so each item alone is taken; 5 of them pass the stream's.
    let sent = 0;
    for (let seq = 0; seq < 12; seq += 1) {
      if (!await server.send(packMessage([{ kind: FrameKind.StreamItem, call: id, body: itemOf(seq, 16) }]))) break;
      sent += 1;
    }
    expect(sent).toBeGreaterThan(6);
    // The first item arrived whole; the call then failed on the item past the weight.
    const firstItem = await first;
    expect((firstItem.value as { bs: Uint8Array[] }).bs.length).toBeGreaterThan(200_000);
    // The items taken before the failure are those that fitted: fewer than were sent.
    let taken = 1;
    let failure: GdrpcError | undefined;
    while (failure === undefined && taken <= sent) {
      await stream.next().then(() => { taken += 1; }, (e: GdrpcError) => { failure = e; });
    }
    expect(failure?.code).toBe(Code.RESOURCE_EXHAUSTED);
    expect(failure?.message).toMatch(/stream items that would hold \d+ bytes of heap untaken/);
    expect(taken).toBeLessThan(sent);
    console.log(`[decode-weight] ${sent} items of 4 MiB sent, ${taken} taken before the call failed`);
  }, 90_000);

  it(`a client stream whose items the handler has not taken would weigh more than ${MAX_UNTAKEN_WEIGHT} bytes on the server: the call fails RESOURCE_EXHAUSTED`, async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => { release = resolve; });
    let outcome: unknown;
    // The handler takes nothing until the test lets it.
    const sum = (async (items: AsyncIterable<unknown>) => {
      await held;
      try {
        for await (const _ of items) { /* drained */ }
        outcome = 'drained';
      } catch (error) {
        outcome = (error as GdrpcError).code;
      }
      return { total: 0, items: 0 };
    }) as never;
    const pair = await inProcessEcho({ sum });
    closers.push(() => pair.close());
    const raw = await RawPeer.connect(Number(pair.server.address!.port));
    closers.push(() => raw.close());
    await raw.auth();
    expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
    raw.keepAlive(500);
    await raw.sendBody(FrameKind.Request, 1, { svc: EchoDescriptor.name, m: 'sum', win: 64 });
    const x = { dt: 'u8', sh: [4], n: 4, mt: 'host', m: 'i', b: new Uint8Array(4) };
    // Each item's `junk` (ignored, but decoded) of 16-byte strings weighs about 63 MB.
    const junk = Array.from({ length: Math.floor((4 * 1024 * 1024 - 8192) / 18) }, () => new Uint8Array(16));
    for (let seq = 0; seq < 8; seq += 1) {
      await raw.sendBody(FrameKind.StreamItem, 1, { seq, a: { x, junk } }).catch(() => {});
    }
    release();
    await expect.poll(() => outcome, { timeout: 30_000, interval: 100 }).toBe(Code.RESOURCE_EXHAUSTED);
  }, 90_000);

  it('an ERROR whose details weigh more than 256 KiB decoded reaches the caller without them, and a message past 16 Ki characters cut', async () => {
    const { client, server } = await clientOfRawServer();
    const calling = client.unary(EchoDescriptor.methods.ping, { n: 1 }, { deadline: 20_000 }).catch((e: GdrpcError) => e);
    const id = await server.request();
    // 80,000 empty strings: 80 KB on the wire, about 2 MB decoded.
    const body = packr.pack({ v: 2, code: Code.NOT_FOUND, msg: 'm'.repeat(40_000), det: { junk: Array.from({ length: 80_000 }, () => '') } });
    expect(await server.send(packMessage([{ kind: FrameKind.Error, call: id, body }]))).toBe(true);
    const error = await calling as GdrpcError;
    expect(error.code).toBe(Code.NOT_FOUND);
    expect(error.details?.junk).toBeUndefined();
    expect(String(error.details?.detailsDropped)).toMatch(/weighed about \d+ bytes decoded/);
    expect(error.rawMessage.length).toBeLessThan(17_000);
    expect(error.rawMessage).toMatch(/more characters cut/);
    // Small details come through as they were.
    const again = client.unary(EchoDescriptor.methods.ping, { n: 2 }, { deadline: 20_000 }).catch((e: GdrpcError) => e);
    const second = await server.request();
    expect(await server.send(packMessage([{ kind: FrameKind.Error, call: second, body: packr.pack({ v: 2, code: Code.NOT_FOUND, msg: 'no', det: { why: 'here' } }) }]))).toBe(true);
    const small = await again as GdrpcError;
    expect(small.details?.why).toBe('here');
    // A long message alone does not cost the details (a helper session found them dropped).
    const third = client.unary(EchoDescriptor.methods.ping, { n: 3 }, { deadline: 20_000 }).catch((e: GdrpcError) => e);
    const id3 = await server.request();
    expect(await server.send(packMessage([{ kind: FrameKind.Error, call: id3, body: packr.pack({ v: 2, code: Code.UNAVAILABLE, msg: 'l'.repeat(150_000), det: { retryable: true, path: 'a.b' } }) }]))).toBe(true);
    const long = await third as GdrpcError;
    expect(long.details?.retryable).toBe(true);
    expect(long.path).toBe('a.b');
  }, 60_000);
});
