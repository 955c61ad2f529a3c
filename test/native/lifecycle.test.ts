// Close semantics: double close is a no-op, use after close is FAILED_PRECONDITION, parents
// refuse to close under live children, Worker.close cancels and closes what hangs off it, and
// processes exit by themselves when nothing is live.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { Context, Endpoint, Listener, MemoryRegion, RemoteKey, Worker, nativeStats } from '../../core/ucx/index.ts';
import { NativePeer } from './fixture.ts';
import { disposePeers, spawnPeer } from '../support/peer.ts';
import { connect, EXACT } from './local.ts';
import { pattern } from './pattern.ts';

afterEach(disposePeers);
const config = { TLS: 'tcp' };
const exitChild = fileURLToPath(new URL('./exit-child.ts', import.meta.url));

describe('the wake-up build', () => {
  // The dispatcher posts its control receive differently per build (docs/binding.md "Two builds of
  // the wake-up"); npm install builds `uv` wherever Node's headers carry uv.h, as they do here.
  it.skipIf(process.env.GDRPC_ADDON_PATH !== undefined)('is named by Worker.wakeup: uv for the build npm install made', async () => {
    const context = Context.create({ config: { TLS: 'tcp' } });
    const worker = Worker.create(context);
    try {
      expect(worker.wakeup).toBe('uv');
    } finally {
      await worker.close();
      context.close();
    }
  });
});

describe('close semantics', () => {
  it('closes every handle twice without error and refuses use after close', async () => {
    const context = Context.create({ config });
    const worker = Worker.create(context);
    const listener = Listener.create(worker, { host: '127.0.0.1' });
    const ep = await connect(worker, listener.port);
    const region = MemoryRegion.map(context, new ArrayBuffer(1024));
    const rkey = RemoteKey.unpack(ep, region.packRkey());

    rkey.close();
    rkey.close();
    await expect(ep.put(region.span(), region.address, rkey)).rejects.toMatchObject({ code: 'FAILED_PRECONDITION' });
    await ep.close();
    await ep.close();
    expect(ep.closed).toBe(true);
    await expect(ep.tagSend(1n, Buffer.alloc(1))).rejects.toMatchObject({ code: 'FAILED_PRECONDITION' });
    listener.close();
    listener.close();
    region.close();
    region.close();
    expect(() => region.span()).toThrow(expect.objectContaining({ code: 'FAILED_PRECONDITION' }));
    expect(() => region.packRkey()).toThrow(expect.objectContaining({ code: 'FAILED_PRECONDITION' }));
    await worker.close();
    await worker.close();
    await expect(worker.tagRecv(Buffer.alloc(1), 1n, EXACT)).rejects.toMatchObject({ code: 'FAILED_PRECONDITION' });
    expect(() => worker.progress()).toThrow(expect.objectContaining({ code: 'FAILED_PRECONDITION' }));
    expect(() => Endpoint.connect(worker, { host: '127.0.0.1', port: 1 })).toThrow(expect.objectContaining({ code: 'FAILED_PRECONDITION' }));
    context.close();
    context.close();
    expect(() => Worker.create(context)).toThrow(expect.objectContaining({ code: 'FAILED_PRECONDITION' }));
    expect(() => MemoryRegion.map(context, new ArrayBuffer(8))).toThrow(expect.objectContaining({ code: 'FAILED_PRECONDITION' }));
    expect(nativeStats()).toEqual({ contexts: 0, workers: 0, endpoints: 0, listeners: 0, regions: 0, rkeys: 0, requests: 0 });
  });

  it('keeps parents open while children live', async () => {
    const context = Context.create({ config });
    const worker = Worker.create(context);
    expect(() => context.close()).toThrow(expect.objectContaining({ code: 'FAILED_PRECONDITION' }));
    await worker.close();
    const region = MemoryRegion.map(context, new ArrayBuffer(64));
    expect(() => context.close()).toThrow(expect.objectContaining({ code: 'FAILED_PRECONDITION' }));
    expect(context.closed).toBe(false);
    region.close();
    context.close();
    expect(context.closed).toBe(true);
  });

  it('refuses to unmap a region while an operation uses it', async () => {
    const context = Context.create({ config });
    const worker = Worker.create(context);
    const region = MemoryRegion.map(context, new ArrayBuffer(256));
    const received = worker.tagRecv(region.span(0, 128), 99n, EXACT);
    expect(() => region.close()).toThrow(expect.objectContaining({ code: 'FAILED_PRECONDITION' }));
    await worker.close();
    await expect(received).rejects.toMatchObject({ code: 'CANCELLED' });
    region.close();
    context.close();
  });

  it('Worker.close cancels pending operations and closes endpoints and listeners', async () => {
    await using peer = await NativePeer.start(config);
    const context = Context.create({ config });
    const worker = Worker.create(context);
    const listener = Listener.create(worker, { host: '127.0.0.1' });
    const ep = await connect(worker, peer.port);
    const recv = worker.tagRecv(Buffer.alloc(8), 5n, EXACT);
    const send = ep.tagSend(0xbeefn, pattern(4 << 20, 1));  // rendezvous, never received
    const closeEvent = new Promise<void>((resolve) => ep.once('close', resolve));
    await worker.close();
    await expect(recv).rejects.toMatchObject({ code: 'CANCELLED' });
    await expect(send).rejects.toMatchObject({ code: 'CANCELLED' });
    await closeEvent;
    expect(ep.closed).toBe(true);
    expect(listener.closed).toBe(true);
    context.close();
    expect(nativeStats()).toMatchObject({ workers: 0, endpoints: 0, listeners: 0, requests: 0 });
  });

  // Destroying the worker purges the TCP endpoint's unfinished zero-copy send, and UCX calls that
  // send's completion then: the binding must still own the request (it crashed with SIGSEGV in
  // about half the runs under CPU load before).
  it.each([1, 2, 3])('Worker.close with a 256 MiB send to a stopped peer in flight does not crash (%i)', async () => {
    await using peer = await NativePeer.start(config);
    const context = Context.create({ config });
    const worker = Worker.create(context);
    const ep = await connect(worker, peer.port);
    peer.stop();
    const send = ep.tagSend(0xfeedn, pattern(256 << 20, 2), { untilComplete: true }).then(() => 'OK', (e: { code: string }) => e.code);
    await new Promise((resolve) => setTimeout(resolve, 50));
    await worker.close();
    expect(['CANCELLED', 'UNAVAILABLE']).toContain(await send);
    context.close();
    expect(nativeStats()).toMatchObject({ workers: 0, endpoints: 0, requests: 0 });
    await peer.kill();
  });

  it('Endpoint.close rejects its pending sends with CANCELLED', async () => {
    await using peer = await NativePeer.start(config);
    const context = Context.create({ config });
    const worker = Worker.create(context);
    const ep = await connect(worker, peer.port);
    const send = ep.tagSend(0xbeefn, pattern(4 << 20, 1));
    await ep.close({ force: true });
    await expect(send).rejects.toMatchObject({ code: 'CANCELLED' });
    await worker.close();
    context.close();
  });

  it('an endpoint made to a listener tells its own port, the one the listener saw, from the start', async () => {
    const context = Context.create({ config });
    const worker = Worker.create(context);
    const seen: number[] = [];
    const listener = Listener.create(worker, { host: '127.0.0.1', accept: (r) => { seen.push(r.clientPort); return true; } });
    const eps = Array.from({ length: 3 }, () => Endpoint.connect(worker, { host: '127.0.0.1', port: listener.port }));
    const ports = eps.map((ep) => ep.localPort());
    for (const ep of eps) await ep.flush();
    expect(new Set(ports).size).toBe(3);
    expect([...seen].sort()).toEqual([...ports].sort());
    for (const ep of eps) await ep.close({ force: true });
    listener.close();
    await worker.close();
    context.close();
  });

  it('a listener can reject a connection; the client sees UNAVAILABLE', async () => {
    const context = Context.create({ config });
    const worker = Worker.create(context);
    const seen: string[] = [];
    const listener = Listener.create(worker, { host: '127.0.0.1', accept: (r) => { seen.push(r.clientAddress); return false; } });
    const ep = Endpoint.connect(worker, { host: '127.0.0.1', port: listener.port });
    const error = new Promise((resolve) => ep.once('error', resolve));
    await expect(ep.flush()).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    await expect(error).resolves.toMatchObject({ code: 'UNAVAILABLE' });
    expect(seen).toEqual(['127.0.0.1']);
    expect(ep.failed).toBe(true);
    await worker.close();
    context.close();
  });

  // One request: with several in flight at once, UCX 1.22 itself crashes when the listener goes
  // (docs/security.md "Open gaps", openucx/ucx#11087).
  it.each([1])('an accept callback that closes its listener (%i request): the request is rejected, nothing crashes', async (count) => {
    const context = Context.create({ config });
    const worker = Worker.create(context);
    let asked = 0;
    const listener: Listener = Listener.create(worker, { host: '127.0.0.1', accept: () => {
      asked += 1;
      listener.close();
      return true;  // too late: the listener is closing
    } });
    const port = listener.port;
    const eps = Array.from({ length: count }, () => Endpoint.connect(worker, { host: '127.0.0.1', port }));
    for (const ep of eps) await expect(ep.flush()).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    expect(asked).toBe(1);
    expect(listener.closed).toBe(true);
    expect(worker.stats().liveListeners).toBe(0);
    await worker.close();
    context.close();
  });

  it('connecting to a port nobody listens on fails with UNAVAILABLE', async () => {
    const context = Context.create({ config });
    const worker = Worker.create(context);
    const probe = Listener.create(worker, { host: '127.0.0.1' });
    const port = probe.port;
    probe.close();
    const ep = Endpoint.connect(worker, { host: '127.0.0.1', port });
    await expect(ep.flush()).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    await worker.close();
    context.close();
  });
});

describe('process exit', () => {
  function run(mode: string): { status: number | null; signal: NodeJS.Signals | null; stderr: string } {
    const r = spawnSync(process.execPath, ['--import', 'tsx', exitChild, mode], { encoding: 'utf8', timeout: 20_000 });
    return { status: r.status, signal: r.signal, stderr: r.stderr };
  }

  it('an idle worker does not keep the process alive', () => {
    expect(run('idle')).toMatchObject({ status: 0, signal: null });
  });

  it('exiting with everything open runs the cleanup hook without crashing', () => {
    const result = run('leak');
    expect(result.stderr).not.toMatch(/Segmentation|Aborted|core dumped/);
    expect(result).toMatchObject({ status: 0, signal: null });
  });

  it('a listener keeps the process alive', async () => {
    await using child = await spawnPeer(exitChild, { args: ['listening'] });
    const early = await Promise.race([child.exited.then((exit) => exit.signal ?? exit.code), new Promise((r) => setTimeout(() => r('alive'), 1500))]);
    await child.kill();
    expect(early).toBe('alive');
  });
});
