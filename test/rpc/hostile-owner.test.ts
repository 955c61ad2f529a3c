// An owner of remote tensors that answers what no gdrpc owner does (a raw server in its place,
// fixtures/raw-server.ts): the puller fails the pull, allocates nothing it keeps, and never
// hands back tensors that are not there.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Packr } from 'msgpackr';
import { Client, Code, RemoteTensor, Tensor, TensorPool, Runtime, type GdrpcError } from '../../core/index.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { packMessage } from '../../core/wire/message.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { RawServer } from './fixtures/raw-server.ts';
import { Endpoint } from '../../core/ucx/index.ts';
import { OWNERS_AT_ONCE } from '../../core/rpc/remote/remote.ts';
import { DEFAULT_PULL_DEADLINE_MS, PULL_REPORT_WAIT_MS, pullLimits } from '../../core/rpc/remote/owner-client.ts';

const packr = new Packr({ useRecords: false });
const opened: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  for (const thing of opened.splice(0).reverse()) await thing.close();
});

const ROWS = 1024;
const COLS = 1024;  // u16: 2 MiB a handle, past pullStacked's 1 MiB, so pullAll asks with pullMany
const BYTES = ROWS * COLS * 2;

/** A client holding two handles whose owner is a raw server, and that raw server. */
async function handlesOfRawOwner(): Promise<{ client: Client; handles: RemoteTensor[]; owner: RawServer }> {
  const owner = RawServer.listen();
  const server = RawServer.listen();
  opened.push(owner, server);
  const connecting = Client.connect(server.address);
  await server.admit();
  const client = await connecting;
  opened.push(client);
  const handles: RemoteTensor[] = [];
  for (const x of [1, 2]) {
    const call = client.unary(EchoDescriptor.methods.region, { rows: ROWS, cols: COLS });
    const request = (await server.receive())?.find((f) => f.kind === FrameKind.Request);
    const h = { dt: 'u16', sh: [ROWS, COLS], n: BYTES, mt: 'host', m: 'h', o: owner.address, x, s: new Uint8Array(16).fill(x) };
    await server.sendMessage(packMessage([{ kind: FrameKind.Response, call: request!.call, body: packr.pack({ v: 2, r: { h } }) }]));
    handles.push((await call).h as RemoteTensor);
  }
  return { client, handles, owner };
}

describe('a hostile owner', () => {
  const where = [
    ['a tensor per handle made here', () => ({})],
    ['the tensors from a pool given', (pool: TensorPool) => ({ pool })],
    ['tensors given in into', (_: TensorPool, into: Tensor[]) => ({ into })],
  ] as const;
  for (const count of [0, 3]) {
    it.each(where)(`answering pullMany for 2 handles with ${count} tensors fails pullAll INTERNAL, nothing allocated (%s)`, async (_, options) => {
      const { handles, owner } = await handlesOfRawOwner();
      const runtime = Runtime.create();
      opened.push(runtime);
      const pool = runtime.createPool({ device: 'cpu', bytes: 8 * BYTES });
      const into = [Tensor.empty([ROWS, COLS], 'u16'), Tensor.empty([ROWS, COLS], 'u16')];
      const pulling = RemoteTensor.pullAll(handles, options(pool, into));
      pulling.catch(() => {});
      await owner.admit();
      const request = (await owner.receive())?.find((f) => f.kind === FrameKind.Request);
      expect(request).toBeDefined();
      const ts = Array.from({ length: count }, (_, i) => ({ dt: 'u16', sh: [ROWS, COLS], n: BYTES, mt: 'host', m: 't', x: 100 + i }));
      await owner.sendMessage(packMessage([{ kind: FrameKind.Response, call: request!.call, body: packr.pack({ v: 2, r: { ts } }) }]));
      // A few bytes under each id: the puller's refusals take them at once.
      for (const t of ts) await owner.payload(t.x, new Uint8Array(16));
      const failure = await pulling.then(() => undefined, (error: GdrpcError) => error);
      expect(failure?.code).toBe(Code.INTERNAL);
      expect(failure?.message).toMatch(`expected a list of 2, got ${count}`);
      expect(pool.stats()).toMatchObject({ used: 0, liveTensors: 0 });
      for (const t of into) t.release();
    });
  }

  // An owner that admits the puller and never answers (keeping its connection alive) held a pull,
  // and the connection it made, for ever: a handler pulling from its caller outlived the call.
  const stops = [
    ['its deadline', () => ({ deadline: 300 }), Code.DEADLINE_EXCEEDED],
    ['its signal', () => ({ signal: AbortSignal.timeout(300) }), Code.CANCELLED],
  ] as const;
  it.each(stops)('a pull from an owner that never answers ends at %s, and closes the connection it made', async (_, limits, code) => {
    const { handles, owner } = await handlesOfRawOwner();
    const pulling = handles[0]!.pull(limits());
    pulling.catch(() => {});
    await owner.admit();
    expect((await owner.receive())?.map((f) => f.kind)).toEqual([FrameKind.Request]);
    const failure = await pulling.then(() => undefined, (error: GdrpcError) => error);
    expect(failure?.code).toBe(code);
    expect(await owner.closedWithin(10_000)).toBe('closed');
  });

  it(`a pull's connection to an owner that promised reports of its sends (rep) and sends none closes ${PULL_REPORT_WAIT_MS} ms after the pull, not at transferTimeoutMs`, async () => {
    // 200 such pulls held 202 endpoints and the runtime's window budget for 30 s.
    const { handles, owner } = await handlesOfRawOwner();
    const pulling = handles[0]!.pull();
    await owner.admit({ rep: true, rpt: true });
    const request = (await owner.receive())?.find((f) => f.kind === FrameKind.Request);
    expect(request).toBeDefined();
    await owner.sendMessage(packMessage([{ kind: FrameKind.Response, call: request!.call, body: packr.pack({ v: 2, r: { t: { dt: 'u16', sh: [ROWS, COLS], n: BYTES, mt: 'host', m: 't', x: 1 } } }) }]));
    await owner.payload(1, new Uint8Array(BYTES).fill(3));
    const tensor = await pulling;
    expect(tensor.byteLength).toBe(BYTES);
    tensor.release();
    // transferTimeoutMs is 30 s: the connection went with the report wait.
    expect(await owner.closedWithin(PULL_REPORT_WAIT_MS + 4000)).toBe('closed');
  });

  it.each(['pullAll', 'pullBlocks'] as const)('%s from an owner that never answers ends at its deadline', async (how) => {
    const { handles, owner } = await handlesOfRawOwner();
    const pulling = how === 'pullAll' ? RemoteTensor.pullAll(handles, { deadline: 300 }) : handles[0]!.pullBlocks([0, 1], { deadline: 300 });
    pulling.catch(() => {});
    await owner.admit();
    expect((await owner.receive())?.[0]?.kind).toBe(FrameKind.Request);
    const failure = await pulling.then(() => undefined, (error: GdrpcError) => error);
    expect(failure?.code).toBe(Code.DEADLINE_EXCEEDED);
    expect(await owner.closedWithin(10_000)).toBe('closed');
  });
});

describe('owners that never send HELLO', () => {
  /** A client holding one handle of each of `count` owners that accept a connection and send nothing. */
  async function handlesOfSilentOwners(count: number): Promise<{ handles: RemoteTensor[]; owners: RawServer[] }> {
    const owners = Array.from({ length: count }, () => RawServer.listen());
    const server = RawServer.listen();
    opened.push(...owners, server);
    const connecting = Client.connect(server.address);
    await server.admit();
    const client = await connecting;
    opened.push(client);
    const handles: RemoteTensor[] = [];
    for (const [i, owner] of owners.entries()) {
      const call = client.unary(EchoDescriptor.methods.region, { rows: 1, cols: 1 });
      const request = (await server.receive())?.find((f) => f.kind === FrameKind.Request);
      const h = { dt: 'u16', sh: [1, 1], n: 2, mt: 'host', m: 'h', o: owner.address, x: i + 1, s: new Uint8Array(16).fill(1) };
      await server.sendMessage(packMessage([{ kind: FrameKind.Response, call: request!.call, body: packr.pack({ v: 2, r: { h } }) }]));
      handles.push((await call).h as RemoteTensor);
    }
    return { handles, owners };
  }

  it(`pullAll dials ${OWNERS_AT_ONCE} owners at a time, none once its deadline passed, and fails DEADLINE_EXCEEDED, not at the connect timeout`, async () => {
    // One result's handles naming 5,000 owners (one owner spelled 5,000 ways) opened 4,792
    // connections at once and went on dialling past the pull's deadline; and a connect to an
    // owner went on to its 5 s timeout past a pull's 1 s deadline.
    const { handles, owners } = await handlesOfSilentOwners(OWNERS_AT_ONCE + 4);
    // The dials themselves: on a busy machine a dial made may reach its owner's listener only
    // after the deadline closed it (an owner then saw 7 connections of the 8).
    const ownerPorts = new Set(owners.map((owner) => owner.listener.port));
    const dial = vi.spyOn(Endpoint, 'connect');
    try {
      const failure = await RemoteTensor.pullAll(handles, { deadline: 1000 }).then(() => undefined, (error: GdrpcError) => error);
      expect(failure?.code).toBe(Code.DEADLINE_EXCEEDED);
      expect(new Set(dial.mock.calls.map(([, options]) => options.port).filter((port) => ownerPorts.has(port))).size).toBe(OWNERS_AT_ONCE);
    } finally {
      dial.mockRestore();
    }
  });

  it('a pull\'s signal ends its connect: CANCELLED, and the connection is closed then, not at the connect timeout', async () => {
    const { handles: [handle], owners: [owner] } = await handlesOfSilentOwners(1);
    const failure = await handle!.pull({ signal: AbortSignal.timeout(300) }).then(() => undefined, (error: GdrpcError) => error);
    expect(failure?.code).toBe(Code.CANCELLED);
    await owner!.accepted();
    // The connect timeout is 5 s: the connection went with the signal.
    expect(await owner!.closedWithin(3000)).toBe('closed');
  });
});

describe('pull limits', () => {
  it(`a pull given no deadline has one ${DEFAULT_PULL_DEADLINE_MS} ms from its start; Infinity gives none`, () => {
    const before = Date.now();
    const { deadline } = pullLimits({});
    expect(deadline!.getTime()).toBeGreaterThanOrEqual(before + DEFAULT_PULL_DEADLINE_MS);
    expect(deadline!.getTime()).toBeLessThanOrEqual(Date.now() + DEFAULT_PULL_DEADLINE_MS);
    expect(pullLimits({ deadline: Infinity })).toEqual({});
    const signal = new AbortController().signal;
    expect(pullLimits({ deadline: new Date(5), signal })).toEqual({ deadline: new Date(5), signal });
  });

  it('a pull refuses a deadline or signal of the wrong type (INVALID_ARGUMENT)', async () => {
    const { handles } = await handlesOfRawOwner();
    await expect(handles[0]!.pull({ deadline: 'soon' as never })).rejects.toMatchObject({ code: Code.INVALID_ARGUMENT });
    await expect(handles[0]!.pullBlocks([0], { signal: {} as never })).rejects.toMatchObject({ code: Code.INVALID_ARGUMENT });
    await expect(RemoteTensor.pullAll(handles, { deadline: NaN })).rejects.toMatchObject({ code: Code.INVALID_ARGUMENT });
  });
});
