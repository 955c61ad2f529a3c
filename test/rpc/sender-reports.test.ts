// Sender reports (SENT frames): a tag receiver cannot ask UCX how its bytes came, so the sender
// reports UCX's description of its completed send, and the receiver's callInfo (or a handler's
// ctx.transfers) carries it once it came. Covered here: the bookkeeping a peer cannot abuse, the
// mapping of a report to a path, both directions of a real call for eager and rendezvous sizes,
// and a raw client that lies, stays silent or sends reports nobody asked for.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Code, confirmedCallInfo, GdrpcError, Runtime, Server, callInfo, type CallContext, type Tensor, type TransferInfo, type UnaryHandler } from '../../core/index.ts';
import { MAX_EARLY_REPORTS, MAX_PENDING_REPORTS, MAX_REPORTS_PER_FRAME, MAX_REPORTS_PER_MESSAGE, REPORT_DESCRIPTIONS, TransferReports } from '../../core/rpc/connection/reports.ts';
import { ReportBatch, reportFrames } from '../../core/rpc/connection/report-batch.ts';
import { decodeFrame, encodeFrame } from '../../core/wire/codec.ts';
import { FRAME_HEADER, packMessage } from '../../core/wire/message.ts';
import { applySenderReport } from '../../core/rpc/movers/report.ts';
import type { TransferPlan } from '../../core/rpc/movers/plan.ts';
import { FrameKind, type FrameBody } from '../../core/wire/frames.ts';
import { ConnectionKey, dataTag, EXACT_MASK } from '../../core/wire/tag.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { patterned } from './fixtures/tensors.ts';
import { RawPeer } from './fixtures/raw-peer.ts';
import { startServer } from './fixtures/peers.ts';
import { disposePeers } from '../support/peer.ts';
import { runtimeWith } from './fixtures/runtime-env.ts';
import { parseProtocolTables, protocolBody, usedRowFor, type ProtocolRow } from '../gpu/fixtures/proto-info.ts';

const TCP_EAGER = '{cpml|proto|init} tag_send from host memory length 8193 eager zero-copy copy-out tcp/lo 10.2 MB/s 767.92 us';
const GPU_PIPELINE = '{cpml|proto|cb|init|rk_use} tag_send from cuda/GPU0 length 65536 rendezvous pipeline cuda_copy, frag host tcp/lo 1000.0 MB/s 60.00 us';

describe('TransferReports', () => {
  it('hands a report over whichever comes first, the report or the one who waits', async () => {
    const reports = new TransferReports(() => 60_000);
    reports.expect(1);
    reports.deliver(1, 'early');
    expect(await reports.take(1)).toBe('early');
    reports.expect(2);
    const waiting = reports.take(2);
    reports.deliver(2, 'late');
    expect(await waiting).toBe('late');
    expect(reports.size).toBe(0);
    reports.close();
  });

  it('keeps a bounded few reports for transfers not announced yet, and only the first report of one', async () => {
    const reports = new TransferReports(() => 60_000);
    // A client decodes a RESPONSE a few microtasks after the message that carried it: a report
    // routed in between waits for the announcement.
    reports.deliver(3, 'before its frame');
    reports.expect(3);
    expect(await reports.take(3)).toBe('before its frame');
    for (let x = 100; x < 100 + 10 * MAX_EARLY_REPORTS; x += 1) reports.deliver(x, 'unasked');
    expect(reports.size).toBe(MAX_EARLY_REPORTS);
    expect(await reports.take(5)).toBeUndefined();  // never announced
    reports.expect(7);
    reports.deliver(7, 'first');
    reports.deliver(7, 'second');
    expect(await reports.take(7)).toBe('first');
    reports.close();
    expect(reports.size).toBe(0);
  });

  it('keeps a report that came long before anyone asked; a second take of one transfer hears "no report"', async () => {
    const reports = new TransferReports(() => 20);
    reports.expect(1);
    reports.deliver(1, 'early');
    await new Promise((resolve) => setTimeout(resolve, 80));
    expect(await reports.take(1)).toBe('early');
    reports.expect(2);
    reports.expect(2);  // announced twice: one entry
    const first = reports.take(2);
    expect(await reports.take(2)).toBeUndefined();
    reports.deliver(2, 'late');
    expect(await first).toBe('late');
    // An early report of a transfer never announced goes after the wait time.
    reports.deliver(9, 'stray');
    await new Promise((resolve) => setTimeout(resolve, 80));
    expect(reports.size).toBe(0);
    reports.close();
  });

  it('ends waits on forget, close, overdue and overflow with "no report"', async () => {
    const reports = new TransferReports(() => 60_000);
    reports.expect(1);
    const forgotten = reports.take(1);
    reports.forget(1);
    expect(await forgotten).toBeUndefined();
    reports.expect(2);
    const closed = reports.take(2);
    reports.close();
    expect(await closed).toBeUndefined();
    reports.expect(3);  // closed: not kept
    expect(reports.size).toBe(0);

    const quick = new TransferReports(() => 20);
    quick.expect(1);
    expect(await quick.take(1)).toBeUndefined();
    expect(quick.size).toBe(0);

    const full = new TransferReports(() => 60_000);
    full.expect(0);
    const oldest = full.take(0);
    for (let x = 1; x <= MAX_PENDING_REPORTS; x += 1) full.expect(x);
    expect(await oldest).toBeUndefined();
    expect(full.size).toBe(MAX_PENDING_REPORTS);
    full.close();
  });

  it('reads a description once while it keeps coming back, and forgets the oldest of more than 64', () => {
    const reports = new TransferReports(() => 60_000);
    const reads: string[] = [];
    const read = (text: string): string => { reads.push(text); return text.toUpperCase(); };
    expect(reports.reading('a', read)).toBe('A');
    expect(reports.reading('a', read)).toBe('A');
    expect(reads).toEqual(['a']);
    for (let i = 0; i < 64; i += 1) reports.reading(`d${i}`, read);
    expect(reports.reading('d63', read)).toBe('D63');
    expect(reads.length).toBe(65);
    reports.reading('a', read);  // the oldest, forgotten when the 65th came
    expect(reads.length).toBe(66);
    reports.close();
  });

  it('keeps at most 1,024 characters of a report', async () => {
    const reports = new TransferReports(() => 60_000);
    reports.expect(1);
    reports.deliver(1, 'x'.repeat(100_000));
    expect((await reports.take(1))!.length).toBe(1024);
    reports.close();
  });
});

describe('REPORTS: many reports a frame, descriptions by index', () => {
  it('a receiver takes the descriptions a frame defines, then reads indexes of earlier frames and redefinitions', async () => {
    const reports = new TransferReports(() => 60_000);
    for (const x of [1, 2, 3, 4, 5]) reports.expect(x);
    expect(reports.deliverAll({ x: [1, 2], d: [0, 1], p: { 0: 'zero', 1: 'one' } })).toBeUndefined();
    expect(reports.deliverAll({ x: [3], d: [1] })).toBeUndefined();
    expect(reports.deliverAll({ x: [4], d: [0], p: { 0: 'again' } })).toBeUndefined();
    expect(reports.deliverAll({ x: [5], d: [63], p: { 63: 'y'.repeat(5000) } })).toBeUndefined();
    expect(await Promise.all([1, 2, 3, 4].map((x) => reports.take(x)))).toEqual(['zero', 'one', 'one', 'again']);
    expect((await reports.take(5))!.length).toBe(1024);
    expect(reports.size).toBe(0);
    reports.close();
  });

  it('a receiver refuses a malformed frame whole: no report of it delivered, no description of it kept', async () => {
    const reports = new TransferReports(() => 60_000);
    reports.expect(1);
    const many = MAX_REPORTS_PER_FRAME + 1;
    const refused: Array<[FrameBody<FrameKind.Reports>, RegExp]> = [
      [{ x: [1], d: [] }, /1 transfer ids and 0 description indexes/],
      [{ x: new Array(many).fill(1), d: new Array(many).fill(0), p: { 0: 'a' } }, /1025 reports, over 1024/],
      [{ x: [1], d: [0], p: { 0: 'a', [REPORT_DESCRIPTIONS]: 'b' } }, /defines description '64', not an index from 0 to 63/],
      [{ x: [1], d: [0], p: { '01': 'a' } }, /defines description '01'/],
      [{ x: [1], d: [0], p: { '-1': 'a' } }, /defines description '-1'/],
      [{ x: [1], d: [0], p: { '1.5': 'a' } }, /defines description '1.5'/],
      [{ x: [1], d: [5] }, /names description 5, which it never defined/],
      [{ x: [1], d: [2 ** 40] }, /names description 1099511627776/],
    ];
    for (const [body, why] of refused) expect(reports.deliverAll(body)).toMatch(why);
    // Index 0 was defined only by refused frames: it is still unknown.
    expect(reports.deliverAll({ x: [1], d: [0] })).toMatch(/never defined/);
    expect(reports.deliverAll({ x: [1], d: [0], p: { 0: 'kept' } })).toBeUndefined();
    expect(await reports.take(1)).toBe('kept');
    reports.close();
  });

  it('a sender indexes the first 64 descriptions, defines each in the frame that first uses it, and declines the 65th', () => {
    const batch = new ReportBatch();
    expect(batch.take()).toBeUndefined();
    expect([batch.add(1, 'a'), batch.add(2, 'b'), batch.add(3, 'a')]).toEqual([true, true, true]);
    expect(batch.take()).toEqual({ x: [1, 2, 3], d: [0, 1, 0], p: { 0: 'a', 1: 'b' } });
    expect(batch.take()).toBeUndefined();
    batch.add(4, 'b');
    expect(batch.take()).toEqual({ x: [4], d: [1] });
    for (let i = 2; i < REPORT_DESCRIPTIONS; i += 1) expect(batch.add(10 + i, `d${i}`)).toBe(true);
    expect(batch.add(99, 'one too many')).toBe(false);
    expect(batch.add(100, 'a')).toBe(true);
    const body = batch.take()!;
    expect(body.x).not.toContain(99);
    expect(body.x.at(-1)).toBe(100);
    expect(Object.keys(body.p!)).toHaveLength(REPORT_DESCRIPTIONS - 2);
    // A description over 1,024 characters is indexed by its first 1,024.
    const fresh = new ReportBatch();
    fresh.add(1, 'z'.repeat(2000));
    fresh.add(2, 'z'.repeat(1024));
    expect(fresh.take()).toEqual({ x: [1, 2], d: [0, 0], p: { 0: 'z'.repeat(1024) } });
    // Descriptions whose frame was dropped are defined afresh.
    fresh.forgetDescriptions();
    fresh.add(3, 'b');
    expect(fresh.take()).toEqual({ x: [3], d: [0], p: { 0: 'b' } });
    for (let i = 0; i < MAX_REPORTS_PER_FRAME - 1; i += 1) fresh.add(i, 'b');
    expect(fresh.full).toBe(false);
    fresh.add(0, 'b');
    expect(fresh.full).toBe(true);
  });

  it("a batch over the peer's frame limit leaves in as many frames as it takes, each description defined before its first use", async () => {
    const batch = new ReportBatch();
    const reports = new TransferReports(() => 60_000);
    const described = (x: number): string => `tag_send from host memory length ${x % 100} eager zero-copy copy-out tcp/lo ${'z'.repeat(150)}`;
    for (let x = 0; x < 1100; x += 1) {
      reports.expect(x);
      if (!batch.add(x, described(x))) reports.deliver(x, described(x));  // past 64 descriptions: a SENT each
    }
    const maxFrame = 8 << 10;
    const frames = reportFrames(batch, maxFrame);
    expect(frames.length).toBeGreaterThan(1);
    for (const frame of frames) {
      expect(frame.body.length + FRAME_HEADER).toBeLessThanOrEqual(maxFrame);
      const decoded = decodeFrame({ kind: frame.kind, call: frame.call, source: frame.body, start: 0, end: frame.body.length });
      expect(reports.deliverAll(decoded.body as FrameBody<FrameKind.Reports>)).toBeUndefined();
    }
    for (let x = 0; x < 1100; x += 1) expect(await reports.take(x)).toBe(described(x));
    // What fits one frame is one frame.
    batch.add(5000, described(1));
    expect(reportFrames(batch, 4 << 20)).toHaveLength(1);
    reports.close();
  });

  it('a frame limit under one report and its description sends none, and every description is defined afresh', () => {
    const batch = new ReportBatch();
    batch.add(1, 'a'.repeat(500));
    batch.add(2, 'b');
    expect(reportFrames(batch, 200)).toEqual([]);
    batch.add(3, 'b');
    expect(batch.take()).toEqual({ x: [3], d: [0], p: { 0: 'b' } });
  });

  it('what a sender batches, a receiver reads back through the codec, over many frames and 100 descriptions', async () => {
    const batch = new ReportBatch();
    const reports = new TransferReports(() => 60_000);
    const sentAlone = new Map<number, string>();
    const expected = new Map<number, string>();
    let x = 0;
    for (let frame = 0; frame < 40; frame += 1) {
      for (let k = 0; k < 1 + (frame * 7) % 50; k += 1, x += 1) {
        const description = `protocol ${(x * 13) % 100}`;
        expected.set(x, description);
        reports.expect(x);
        if (!batch.add(x, description)) sentAlone.set(x, description);
      }
      const body = batch.take();
      if (body === undefined) continue;
      const bytes = encodeFrame(FrameKind.Reports, body);
      const decoded = decodeFrame({ kind: FrameKind.Reports, call: 0, source: bytes, start: 0, end: bytes.length });
      expect(decoded.kind).toBe(FrameKind.Reports);
      expect(reports.deliverAll(decoded.body as FrameBody<FrameKind.Reports>)).toBeUndefined();
    }
    for (const [transfer, description] of sentAlone) reports.deliver(transfer, description);
    expect(sentAlone.size).toBeGreaterThan(0);
    for (const [transfer, description] of expected) expect(await reports.take(transfer)).toBe(description);
    reports.close();
  });
});

describe('what a peer\'s long descriptions leave behind', () => {
  it('64 REPORTS definitions and 64 SENT reports of 4 MiB each hold next to nothing once cut to 1,024 characters', () => {
    // A slice keeps the whole string it was cut from alive in V8: these held 512 MiB before each
    // kept description became a string of its own (test/rpc/fixtures/report-copies.ts).
    const fixture = fileURLToPath(new URL('./fixtures/report-copies.ts', import.meta.url));
    const out = execFileSync(process.execPath, ['--expose-gc', '--import', 'tsx', fixture], { encoding: 'utf8', timeout: 120_000 });
    const { heldMiB, entries, lengths } = JSON.parse(out.trim().split('\n').at(-1)!) as { heldMiB: number; entries: number; lengths: number[] };
    console.log(`[report copies] ${entries} early reports and 64 descriptions hold ${heldMiB.toFixed(2)} MiB`);
    expect(lengths).toEqual([1024, 1024]);
    expect(entries).toBe(126);
    expect(heldMiB).toBeLessThan(16);
  });
});

describe('applySenderReport', () => {
  const plan = (from: 'host' | 'cuda', to: 'host' | 'cuda', staged?: string): TransferPlan => ({
    mover: 'tag', bytes: 65536, from, to, bounce: undefined, staged, path: staged !== undefined ? 'staged' : 'tcp', deferProducer: false, refusal: undefined,
  });
  const predicted = (): TransferInfo => ({ argument: 'x', bytes: 65536, mover: 'tag', path: 'tcp', source: 'predicted' });

  it('replaces the prediction with the path the sender\'s description maps to', () => {
    const info = predicted();
    applySenderReport(info, plan('host', 'host'), TCP_EAGER);
    expect(info).toMatchObject({ path: 'tcp', source: 'sender', protocol: TCP_EAGER });
  });

  it('takes the sender\'s memory from UCX, not from the descriptor: GPU memory bounced through host is staged', () => {
    const info = predicted();
    applySenderReport(info, plan('host', 'host'), GPU_PIPELINE);
    expect(info).toMatchObject({ path: 'staged', source: 'sender' });
  });

  it('leaves the prediction where the report says nothing it can read, and gdrpc\'s own staging as it is', () => {
    for (const report of [undefined, '', 'not a UCX description']) {
      const info = predicted();
      applySenderReport(info, plan('host', 'host'), report);
      expect(info.source).toBe('predicted');
      expect(info.path).toBe('tcp');
    }
    const staged: TransferInfo = { ...predicted(), path: 'staged', source: 'gdrpc' };
    applySenderReport(staged, plan('cuda', 'host', 'this UCX cannot register CUDA memory'), TCP_EAGER);
    expect(staged).toMatchObject({ path: 'staged', source: 'gdrpc', protocol: TCP_EAGER });
  });
});

describe('sender reports between a client and a server', () => {
  let serving: Runtime;
  let calling: Runtime;
  let server: Server;
  let client: Client;
  /** What the checksum handler saw of its argument: before and after the client's report. */
  const seen: Array<{ first: TransferInfo[]; confirmed: TransferInfo[] }> = [];
  let checksums = 0;

  beforeAll(async () => {
    serving = Runtime.create();
    calling = Runtime.create();
    const unimplemented = (name: string): UnaryHandler => () => { throw new GdrpcError(Code.UNIMPLEMENTED, name); };
    const handlers: Record<string, UnaryHandler> = Object.fromEntries(Object.keys(EchoDescriptor.methods).map((name) => [name, unimplemented(name)]));
    handlers.ping = (args: { n: number }) => ({ n: args.n });
    handlers.echo = (args: { x: Tensor; tag: string }) => ({ y: args.x, tag: args.tag });
    handlers.echoList = (args: { xs: Tensor[] }) => ({ ys: args.xs });
    handlers.checksum = async (args: { x: Tensor }, ctx: CallContext) => {
      checksums += 1;
      const first = ctx.transfers.map((info) => ({ ...info }));
      const confirmed = (await ctx.confirmedTransfers()).map((info) => ({ ...info }));
      seen.push({ first, confirmed });
      let sum = 0;
      for (const byte of args.x.bytes()) sum += byte;
      return { sum, n: args.x.byteLength };
    };
    server = Server.create({ runtime: serving, poolBytes: 16 << 20, transferTimeoutMs: 1000 }).register(EchoDescriptor, handlers);
    await server.listen({ host: '127.0.0.1', port: 0 });
    client = await Client.connect(server.address!, { runtime: calling, poolBytes: 16 << 20 });
  });
  afterAll(async () => {
    await client?.close();
    await server?.shutdown();
    await calling?.close();
    await serving?.close();
  });

  it('a noStaging call of 5,000 separate tag tensors each way has every one confirmed by its sender', async () => {
    // Gathers off on the client's side: each tensor is its own payload and its own report. With
    // room for 4,096 pending reports, decoding the frame dropped the first ones' entries and the
    // call failed "sent no report"; the bound now holds four frames of the most a frame carries.
    const runtime = runtimeWith({ GDRPC_GATHER: '0' });
    const plain = await Client.connect(server.address!, { runtime, poolBytes: 16 << 20 });
    try {
      const xs = Array.from({ length: 5000 }, (_, i) => patterned(64, i));
      const result = await plain.unary(EchoDescriptor.methods.echoList, { xs }, { mover: 'tag', noStaging: true });
      const ys = result.ys as Tensor[];
      expect(ys).toHaveLength(5000);
      expect(ys.every((y, i) => y.equals(xs[i]!))).toBe(true);
      for (const y of ys) y.release();
      const back = (await confirmedCallInfo(result))!.transfers.filter((t) => t.argument.startsWith('ys'));
      expect(back).toHaveLength(5000);
      expect(back.every((t) => t.source === 'sender' && t.mover === 'tag')).toBe(true);
    } finally {
      await plain.close();
      await runtime.close();
    }
  });

  for (const size of [8193, 1 << 20]) {
    it(`${size} bytes: each receiver ends up with its sender's own description`, async () => {
      const x = patterned(size, 3);
      const result = await client.unary(EchoDescriptor.methods.echo, { x, tag: 'r' }, { mover: 'tag' });
      const info = await confirmedCallInfo(result);
      const sent = info!.transfers.find((t) => t.argument === 'x')!;
      const back = info!.transfers.find((t) => t.argument === 'y')!;
      expect(sent).toMatchObject({ source: 'ucx', path: 'tcp' });
      expect(back).toMatchObject({ source: 'sender', path: 'tcp', protocol: expect.stringMatching(new RegExp(`(tag|rndv)_send from host memory length ${size} .*tcp/`)) });
      (result.y as Tensor).release();

      // The other direction: the handler's view of its argument, before and after the report.
      const count = seen.length;
      const checked = await client.unary(EchoDescriptor.methods.checksum, { x }, { mover: 'tag' });
      expect(checked.n).toBe(size);
      const arrived = seen[count]!;
      expect(arrived.first.map((t) => t.argument)).toEqual(['x']);
      expect(['predicted', 'sender']).toContain(arrived.first[0]!.source);
      expect(arrived.confirmed[0]).toMatchObject({ argument: 'x', source: 'sender', path: 'tcp' });
      // Byte for byte what UCX told the client about the same send.
      expect(arrived.confirmed[0]!.protocol).toBe(callInfo(checked)!.transfers[0]!.protocol);
    });
  }

  it('inline transfers are gdrpc\'s own and wait for nothing', async () => {
    const result = await client.unary(EchoDescriptor.methods.echo, { x: patterned(64, 1), tag: 'i' });
    const info = await confirmedCallInfo(result);
    expect(info!.transfers.map((t) => [t.argument, t.mover, t.source])).toEqual([['x', 'inline', 'gdrpc'], ['y', 'inline', 'gdrpc']]);
    (result.y as Tensor).release();
  });

  describe('from a raw client', () => {
    const SIZE = 64 << 10;

    /** A raw client admitted with `rep` (it promises SENT frames) and `rpt` (it reads REPORTS), or without. */
    async function rawClient(rep: boolean, rpt = false): Promise<RawPeer> {
      const raw = await RawPeer.connect(server.address!.port);
      await raw.sendBody(FrameKind.Auth, 0, { key: raw.key.value, win: 8 << 20, ...(rep ? { rep: true } : {}), ...(rpt ? { rpt: true } : {}) });
      expect((await raw.receive())?.kind).toBe(FrameKind.Ready);
      return raw;
    }

    /** A checksum call with a tag tensor of SIZE bytes under noStaging, its bytes sent, and then
     *  `report` as the SENT for it (none when undefined), or as a REPORTS frame defining it.
     *  Returns the server's answer. */
    async function checksumNoStaging(raw: RawPeer, call: number, report: string | undefined, frame: 'SENT' | 'REPORTS' = 'SENT'): Promise<{ kind: number; body: Record<string, unknown> } | undefined> {
      const x = 40 + call;
      await raw.sendBody(FrameKind.Request, call, { svc: EchoDescriptor.name, m: 'checksum', ns: true, a: { x: { dt: 'u8', sh: [SIZE], n: SIZE, mt: 'host', m: 't', x } } });
      await raw.endpoint.tagSend(dataTag(new ConnectionKey(raw.serverKey), x), new Uint8Array(SIZE).fill(1));
      if (report !== undefined && frame === 'SENT') await raw.sendBody(FrameKind.Sent, call, { x, p: report });
      if (report !== undefined && frame === 'REPORTS') await raw.sendBody(FrameKind.Reports, 0, { x: [x], d: [7], p: { 7: report } });
      return raw.receive(10_000);
    }

    /** An echo call of one tag tensor of SIZE bytes whose result comes back by tag: sends its
     *  bytes, takes the RESPONSE and the result's bytes; returns the result's transfer id. */
    async function echoByTag(raw: RawPeer, call: number): Promise<number> {
      const x = 60 + call;
      await raw.sendBody(FrameKind.Request, call, { svc: EchoDescriptor.name, m: 'echo', mv: 'tag', a: { x: { dt: 'u8', sh: [SIZE], n: SIZE, mt: 'host', m: 't', x }, tag: 'e' } });
      await raw.endpoint.tagSend(dataTag(new ConnectionKey(raw.serverKey), x), new Uint8Array(SIZE).fill(2));
      const response = await raw.receive(10_000);
      expect(response?.kind).toBe(FrameKind.Response);
      const y = (response!.body.r as { y: { m: string; x: number } }).y;
      expect(y.m).toBe('t');
      const into = new Uint8Array(SIZE);
      await raw.worker.tagRecv(into, dataTag(raw.key, y.x), EXACT_MASK);
      expect(into.every((byte) => byte === 2)).toBe(true);
      return y.x;
    }

    it('a client that reads REPORTS gets each report in one: its description defined once, named by its index after that', async () => {
      const raw = await rawClient(true, true);
      try {
        const defined: Record<string, string> = {};
        const frames: Array<Record<string, unknown>> = [];
        for (let call = 1; call <= 4; call += 1) {
          const y = await echoByTag(raw, call);
          const report = await raw.receive();
          expect(report?.kind).toBe(FrameKind.Reports);
          expect(report?.call).toBe(0);
          expect(report!.body.x).toEqual([y]);
          Object.assign(defined, report!.body.p ?? {});
          const [index] = report!.body.d as number[];
          expect(defined[index!]).toMatch(new RegExp(`from host memory length ${SIZE} .*tcp/`));
          frames.push(report!.body);
        }
        // The same size and path describe alike: after the first frames, no definitions.
        expect(Object.keys(defined).length).toBeLessThanOrEqual(2);
        expect(frames.at(-1)!.p).toBeUndefined();
      } finally {
        await raw.close();
      }
    });

    it('a client that does not read REPORTS gets SENT frames', async () => {
      const raw = await rawClient(true);
      try {
        const y = await echoByTag(raw, 1);
        const report = await raw.receive();
        expect(report?.kind).toBe(FrameKind.Sent);
        expect(report!.body.x).toBe(y);
        expect(report!.body.p).toMatch(new RegExp(`from host memory length ${SIZE} .*tcp/`));
      } finally {
        await raw.close();
      }
    });

    it('a REPORTS frame confirms a noStaging call as a SENT does, and a staged report in one fails it', async () => {
      const raw = await rawClient(true, true);
      try {
        const before = checksums;
        const ok = await checksumNoStaging(raw, 3, TCP_EAGER.replace('8193', String(SIZE)), 'REPORTS');
        expect(ok?.kind).toBe(FrameKind.Response);
        expect(seen.at(-1)!.confirmed[0]).toMatchObject({ source: 'sender', path: 'tcp', protocol: TCP_EAGER.replace('8193', String(SIZE)) });
        const staged = await checksumNoStaging(raw, 5, GPU_PIPELINE, 'REPORTS');
        expect(staged?.kind).toBe(FrameKind.Error);
        expect(staged?.body.code).toBe(Code.FAILED_PRECONDITION);
        expect(checksums).toBe(before + 1);
      } finally {
        await raw.close();
      }
    });

    it('a message may carry 16 full REPORTS frames; one that carries more reports in all closes its connection unread', async () => {
      const raw = await rawClient(true, true);
      try {
        const frame = (first: number): { kind: number; call: number; body: Uint8Array } => ({
          kind: FrameKind.Reports,
          call: 0,
          body: encodeFrame(FrameKind.Reports, { x: Array.from({ length: MAX_REPORTS_PER_FRAME }, (_, i) => first + i), d: new Array(MAX_REPORTS_PER_FRAME).fill(0), p: { 0: TCP_EAGER } }),
        });
        const frames = (count: number): Array<{ kind: number; call: number; body: Uint8Array }> => Array.from({ length: count }, (_, k) => frame(k * MAX_REPORTS_PER_FRAME));
        expect(16 * MAX_REPORTS_PER_FRAME).toBe(MAX_REPORTS_PER_MESSAGE);
        await raw.sendMessage(packMessage(frames(16)));
        await raw.sendBody(FrameKind.Request, 3, { svc: EchoDescriptor.name, m: 'ping', a: { n: 3 } });
        expect((await raw.receive())?.body.r).toEqual({ n: 3 });
        await raw.sendMessage(packMessage(frames(17)));
        const answer = await raw.receive();
        expect(answer?.kind).toBe(FrameKind.Error);
        expect(answer?.body.msg).toMatch(new RegExp(`REPORTS frames carry more than ${MAX_REPORTS_PER_MESSAGE} reports in one message`));
      } finally {
        await raw.close();
      }
    });

    it('a malformed REPORTS frame closes only its own connection, with an error that says what was wrong', async () => {
      const errors: GdrpcError[] = [];
      const onError = (error: GdrpcError): void => { errors.push(error); };
      server.on('error', onError);
      const raw = await rawClient(true, true);
      try {
        await raw.sendBody(FrameKind.Reports, 0, { x: [1, 2], d: [0, 3], p: { 0: GPU_PIPELINE } });
        const answer = await raw.receive();
        expect(answer?.kind).toBe(FrameKind.Error);
        expect(answer?.call).toBe(0);
        expect(answer?.body.code).toBe(Code.INVALID_ARGUMENT);
        expect(answer?.body.msg).toMatch(/REPORTS frame names description 3, which it never defined/);
        expect(errors.some((error) => /REPORTS frame names description 3/.test(error.message))).toBe(true);
        // The server answers nothing more on it, and serves everyone else.
        await raw.sendBody(FrameKind.Request, 9, { svc: EchoDescriptor.name, m: 'ping', a: { n: 1 } });
        expect(await raw.receive(500)).toBeUndefined();
        expect((await client.unary(EchoDescriptor.methods.ping, { n: 8 })).n).toBe(8);
      } finally {
        server.off('error', onError);
        await raw.close();
      }
    });

    it('a report that UCX bounced the bytes through host memory fails a noStaging call before its handler runs', async () => {
      const raw = await rawClient(true);
      try {
        const before = checksums;
        const answer = await checksumNoStaging(raw, 3, GPU_PIPELINE);
        expect(answer?.kind).toBe(FrameKind.Error);
        expect(answer?.body.code).toBe(Code.FAILED_PRECONDITION);
        expect(answer?.body.msg).toMatch(/arguments\.x: UCX moved it from .* through host memory \(noStaging\), as the sender reported: .*pipeline/);
        expect(checksums).toBe(before);
        // A truthful report lets the next one through.
        const ok = await checksumNoStaging(raw, 5, TCP_EAGER.replace('8193', String(SIZE)));
        expect(ok?.kind).toBe(FrameKind.Response);
        expect(ok?.body.r).toEqual({ sum: SIZE, n: SIZE });
        expect(seen.at(-1)!.confirmed[0]).toMatchObject({ source: 'sender', path: 'tcp' });
      } finally {
        await raw.close();
      }
    });

    it('a client that promised reports and sends none fails only its own noStaging call, after the transfer timeout', async () => {
      const raw = await rawClient(true);
      try {
        const before = checksums;
        const answer = await checksumNoStaging(raw, 7, undefined);
        expect(answer?.kind).toBe(FrameKind.Error);
        expect(answer?.body.code).toBe(Code.FAILED_PRECONDITION);
        expect(answer?.body.msg).toMatch(/arguments\.x: .* sent no report of how UCX moved it within 1000 ms: noStaging cannot be confirmed/);
        expect(checksums).toBe(before);
        expect((await client.unary(EchoDescriptor.methods.ping, { n: 3 })).n).toBe(3);
      } finally {
        await raw.close();
      }
    });

    it('SENT frames for transfers nobody announced, before admission or from a client without rep, change nothing', async () => {
      const early = await RawPeer.connect(server.address!.port);
      try {
        await early.sendBody(FrameKind.Sent, 0, { x: 1, p: GPU_PIPELINE });
        await early.sendBody(FrameKind.Auth, 0, { key: early.key.value, win: 8 << 20, rep: true });
        expect((await early.receive())?.kind).toBe(FrameKind.Ready);
        for (let x = 0; x < 200; x += 1) await early.sendBody(FrameKind.Sent, 9, { x, p: GPU_PIPELINE });
        await early.sendBody(FrameKind.Request, 11, { svc: EchoDescriptor.name, m: 'ping', a: { n: 4 } });
        const frame = await early.receive();
        expect(frame?.kind).toBe(FrameKind.Response);
        expect(frame?.body.r).toEqual({ n: 4 });
      } finally {
        await early.close();
      }
      // Without `rep` the server does not wait for reports: a SENT that lies is not read.
      const silent = await rawClient(false);
      try {
        const answer = await checksumNoStaging(silent, 13, GPU_PIPELINE);
        expect(answer?.kind).toBe(FrameKind.Response);
        expect(seen.at(-1)!.confirmed[0]).toMatchObject({ source: 'predicted', path: 'tcp' });
      } finally {
        await silent.close();
      }
    });
  });
});

/** Whether a row used for `bytes` has protocol and lanes `body`. */
const used = (rows: ProtocolRow[], bytes: number, body: string): boolean => usedRowFor(rows, bytes, body) !== undefined;

describe('sender reports against what UCX_PROTO_INFO shows', () => {
  afterAll(disposePeers);

  // Processes on one host talk over TCP loopback by default; UCX_MM_ERROR_HANDLING=y in both lets
  // them use shared memory (docs/security.md says why that is not the default).
  it.each([['tcp', {}], ['shared memory', { UCX_MM_ERROR_HANDLING: 'y' }]] as const)('over %s, eager and rendezvous: each report names a protocol the server\'s UCX used, sending or receiving', async (transport, env: Record<string, string>) => {
    const server = await startServer({ poolBytes: 16 << 20 }, { UCX_PROTO_INFO: 'used', ...env });
    const runtime = runtimeWith(env);  // UCX reads its environment when the context is made
    const sizes = [64, 8193, 1 << 20, 4 << 20];
    const reports: Array<{ bytes: number; sentByServer: TransferInfo; receivedByServer: string }> = [];
    try {
      const client = await Client.connect(server.address, { runtime, poolBytes: 16 << 20 });
      for (const size of sizes) {
        const result = await client.unary(EchoDescriptor.methods.echo, { x: patterned(size, 5), tag: 'p' }, { mover: 'tag' });
        expect((result.y as Tensor).equals(patterned(size, 5))).toBe(true);
        const info = (await confirmedCallInfo(result))!;
        const sent = info.transfers.find((t) => t.argument === 'x')!;
        const back = info.transfers.find((t) => t.argument === 'y')!;
        expect(back).toMatchObject({ source: 'sender', path: transport === 'tcp' ? 'tcp' : 'shm' });
        expect(back.protocol).toMatch(transport === 'tcp' ? / tcp\// : / (posix|sysv|cma|xpmem)\//);
        // The server received x as the client's UCX described the send (the server's own report of
        // x is that same string: the SENT carried it), and sent y as its UCX described it.
        reports.push({ bytes: size, sentByServer: back, receivedByServer: sent.protocol! });
        (result.y as Tensor).release();
      }
      await client.close();
      server.send('shutdown 1000');
      expect((await server.exited).code).toBe(0);
    } finally {
      await runtime.close();
      server.kill();
    }
    const blocks = parseProtocolTables(server.output());
    const sending = blocks.filter((block) => !/^rendezvous data fetch/.test(block.operation)).flatMap((block) => block.rows);
    const fetching = blocks.filter((block) => /^rendezvous data fetch into /.test(block.operation)).flatMap((block) => block.rows);
    let fetches = 0;
    for (const { bytes, sentByServer, receivedByServer } of reports) {
      expect(used(sending, bytes, protocolBody(sentByServer.protocol!)), `${bytes} bytes sent: ${sentByServer.protocol}\n${server.output()}`).toBe(true);
      // A rendezvous the server received ran a fetch protocol of its own: the one the report names.
      if (/ rndv_send | rendezvous /.test(receivedByServer)) {
        fetches += 1;
        expect(used(fetching, bytes, protocolBody(receivedByServer).replace(/^rendezvous /, '')), `${bytes} bytes received: ${receivedByServer}\n${server.output()}`).toBe(true);
      }
    }
    // Both rendezvous sizes were checked against the server's fetch table.
    expect(fetches).toBe(2);
  }, 60_000);
});
