// The CUDA shim, and tag send/recv and RMA on CUDA memory between two processes. Without a
// driver only the "unavailable" behaviour runs; the GPU cases skip with the reason printed.
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { cuda } from '../../core/cuda.ts';
import { Context, MemoryRegion, RemoteKey, Worker } from '../../core/ucx/index.ts';
import { NativePeer } from './fixture.ts';
import { disposePeers } from '../support/peer.ts';
import { connect, EXACT } from './local.ts';
import { digest, pattern } from './pattern.ts';

afterEach(disposePeers);
const available = cuda.available();
if (!available) console.log(`CUDA memory cases skipped: ${cuda.unavailableReason()}`);

describe.runIf(!available)('CUDA shim without a driver', () => {
  it('reports unavailable with the loader reason and refuses CUDA calls', () => {
    expect(cuda.available()).toBe(false);
    expect(cuda.unavailableReason()).toMatch(/libcuda\.so\.1|cuInit/);
    expect(cuda.deviceCount()).toBe(0);
    expect(() => cuda.driverVersion()).toThrow(expect.objectContaining({ code: 'FAILED_PRECONDITION' }));
    expect(() => cuda.alloc(0, 16)).toThrow(/CUDA is unavailable|device/);
  });

  it('UCX host memory still works', () => {
    const context = Context.create({ config: { TLS: 'tcp' } });
    expect(context.memoryTypes()).toContain('host');
    const region = MemoryRegion.map(context, new ArrayBuffer(64));
    expect(region.memoryType).toBe('host');
    region.close();
    context.close();
  });
});

describe.runIf(available)('CUDA memory', () => {
  // Default transports: UCX picks cuda_ipc / cuda_copy where it can; TLS never names cuda.
  const config: Record<string, string> = {};
  const context = available ? Context.create({ config }) : undefined!;
  const worker = available ? Worker.create(context) : undefined!;
  afterAll(async () => {
    await worker?.close();
    context?.close();
  });

  function deviceBuffer(size: number, seed?: number): { ptr: bigint; region: MemoryRegion } {
    const ptr = cuda.alloc(0, size);
    if (seed !== undefined) cuda.copy(ptr, pattern(size, seed), size);
    else cuda.memset(ptr, 0, size);
    const region = MemoryRegion.map(context, { address: ptr, length: size, memoryType: 'cuda' });
    return { ptr, region };
  }

  function readBack(ptr: bigint, size: number): Buffer {
    const host = Buffer.alloc(size);
    cuda.copy(host, ptr, size);
    return host;
  }

  it('the shim allocates, sets, copies and describes device memory', () => {
    expect(cuda.deviceCount()).toBeGreaterThan(0);
    expect(cuda.device(0).name.length).toBeGreaterThan(0);
    expect(context.memoryTypes()).toContain('cuda');
    const ptr = cuda.alloc(0, 4096);
    cuda.memset(ptr, 0x5a, 4096);
    expect(readBack(ptr, 4096).every((b) => b === 0x5a)).toBe(true);
    expect(cuda.pointerInfo(ptr)).toEqual({ memoryType: 'cuda', device: 0 });
    cuda.free(ptr);
  });

  it.each([1, 8193, 1 << 20, 64 << 20])('tag send/recv of %i bytes between CUDA buffers', async (size) => {
    await using peer = await NativePeer.start(config);
    const ep = await connect(worker, peer.port);
    const src = deviceBuffer(size, 3);
    const dst = deviceBuffer(size);
    expect(src.region.memoryType).toBe('cuda');
    const echoed = peer.call<{ length: number; memoryType: string }>('echoCuda', { tag: '500', size });
    await peer.event('posted');
    const back = worker.tagRecv(dst.region.span(), 501n, EXACT);
    await ep.tagSend(500n, src.region.span());
    expect(await back).toEqual({ senderTag: 501n, length: size });
    expect(await echoed).toMatchObject({ length: size, memoryType: 'cuda' });
    expect(digest(readBack(dst.ptr, size))).toBe(digest(pattern(size, 3)));
    for (const b of [src, dst]) {
      b.region.close();
      cuda.free(b.ptr);
    }
    await ep.close();
  }, 120_000);

  it.each([8193, 4 << 20])('put and get of %i bytes between CUDA regions', async (size) => {
    await using peer = await NativePeer.start(config);
    const ep = await connect(worker, peer.port);
    const remote = await peer.call<{ address: string; rkey: string; memoryType: string }>('exposeCuda', { size, seed: 9 });
    expect(remote.memoryType).toBe('cuda');
    const rkey = RemoteKey.unpack(ep, Buffer.from(remote.rkey, 'base64'));
    const local = deviceBuffer(size);
    await ep.get(local.region.span(), BigInt(remote.address), rkey);
    expect(digest(readBack(local.ptr, size))).toBe(digest(pattern(size, 9)));
    cuda.copy(local.ptr, pattern(size, 10), size);
    await ep.put(local.region.span(), BigInt(remote.address), rkey);
    await ep.flush();
    expect(await peer.call('digestRegion', { index: 0 })).toBe(digest(pattern(size, 10)));
    rkey.close();
    local.region.close();
    cuda.free(local.ptr);
    await ep.close();
  }, 120_000);
});
