// CUDA tensors. Runs on a machine with a GPU; elsewhere it skips with the reason printed.
import { randomFillSync } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cuda } from '../../core/cuda.ts';
import { Context, nativeStats } from '../../core/ucx/index.ts';
import { DTYPES, elementSize, Tensor, TensorPool, type Device } from '../../core/tensor/index.ts';
import { expectCode } from './expect-error.ts';

const skipReason = !cuda.available() ? `CUDA unavailable: ${cuda.unavailableReason() ?? 'no reason given'}`
  : cuda.deviceCount() === 0 ? 'no CUDA devices' : undefined;
const deviceCount = skipReason === undefined ? cuda.deviceCount() : 0;
const devices: Device[] = Array.from({ length: deviceCount }, (_, i) => `cuda:${i}` as Device);
const pairs: Array<[Device, Device]> = devices.flatMap((a) => devices.filter((b) => b !== a).map((b): [Device, Device] => [a, b]));
if (skipReason !== undefined) console.log(`test/tensor/cuda.test.ts skipped: ${skipReason}`);
else if (pairs.length === 0) console.log(`test/tensor/cuda.test.ts: GPU pair cases skipped: only ${deviceCount} CUDA device`);

const MiB = 1024 * 1024;

function randomHost(bytes: number): Tensor {
  return Tensor.fromArray(randomFillSync(new Uint8Array(bytes)));
}

describe.skipIf(skipReason !== undefined)('CUDA tensors', () => {
  let context: Context;
  beforeAll(() => { context = Context.create(); });
  afterAll(() => { context?.close(); });

  it('allocates on cuda:0 as device memory, not viewable from the host', () => {
    const t = Tensor.empty([1024], 'f32', { device: 'cuda:0' });
    expect(t.device).toBe('cuda:0');
    expect(t.address).not.toBe(0n);
    expect(cuda.pointerInfo(t.address)).toMatchObject({ memoryType: 'cuda', device: 0 });
    expect(t.span()).toBeUndefined();
    expectCode(() => t.bytes(), 'FAILED_PRECONDITION', /to\('cpu'\)/);
    expectCode(() => t.toArray(), 'FAILED_PRECONDITION');
    t.release();
    t.release();
  });

  it.each([0, 1, 4097, MiB + 3])('round-trips %i bytes host -> cuda:0 -> host exactly', (bytes) => {
    const host = randomHost(bytes);
    const device = host.to('cuda:0');
    const back = device.to('cpu');
    expect(Buffer.from(back.bytes()).equals(Buffer.from(host.bytes()))).toBe(true);
    expect(device.equals(host)).toBe(true);
    device.release();
  });

  it.each(DTYPES)('round-trips a %s tensor keeping dtype and shape', (dtype) => {
    const host = Tensor.fromArray(randomFillSync(new Uint8Array(3 * 5 * 8)), { dtype, shape: [3, 5, 8 / elementSize(dtype)] });
    const back = host.to('cuda:0').to('cpu');
    expect(back.dtype).toBe(dtype);
    expect(back.shape).toEqual(host.shape);
    expect(back.equals(host)).toBe(true);
  });

  it('zeros() clears device memory', () => {
    const dirty = Tensor.empty([4096], 'u8', { device: 'cuda:0' });
    cuda.memset(dirty.address, 0xab, 4096);
    const z = Tensor.zeros([1024], 'f32', { device: 'cuda:0' });
    expect(z.to('cpu').bytes().every((b) => b === 0)).toBe(true);
    dirty.release();
    z.release();
  });

  it('equals() on device data finds a difference in the last byte past the compare chunk', () => {
    const bytes = 64 * MiB + 5;
    const host = randomHost(bytes);
    const a = host.to('cuda:0');
    const changed = host.to('cpu');
    const flipped = changed.bytes();
    flipped[bytes - 1] = flipped[bytes - 1]! ^ 1;
    const b = changed.to('cuda:0');
    expect(a.equals(b)).toBe(false);
    expect(a.equals(host)).toBe(true);
    a.release();
    b.release();
  });

  it('release() of an unpooled CUDA tensor frees its memory', () => {
    const size = 256 * MiB;
    const before = cuda.memInfo(0).free;
    const t = Tensor.empty([size], 'u8', { device: 'cuda:0' });
    expect(cuda.memInfo(0).free).toBeLessThanOrEqual(before - size);
    t.release();
    expect(cuda.memInfo(0).free).toBeGreaterThanOrEqual(before - 4 * MiB);
  });

  it.each(devices)('pool on %s is mapped by UCX as CUDA memory and carves tensors inside it', (device) => {
    const index = Number(device.slice(5));
    expect(context.memoryTypes()).toContain('cuda');
    const regionsBefore = nativeStats().regions;
    const pool = TensorPool.create(context, { device, bytes: 8 * MiB });
    try {
      expect(pool.stagingReason).toBeUndefined();
      expect(pool.staged).toBe(false);
      const region = pool.region!;
      expect(region.memoryType).toBe('cuda');
      expect(nativeStats().regions).toBe(regionsBefore + 1);
      const host = randomHost(3 * MiB + 1);
      const t = host.to(device, { pool });
      expect(t.pool).toBe(pool);
      expect(t.address % 256n).toBe(0n);
      expect(cuda.pointerInfo(t.address)).toMatchObject({ memoryType: 'cuda', device: index });
      const span = t.span()!;
      expect(span.region).toBe(region);
      expect(region.address + BigInt(span.offset)).toBe(t.address);
      expect(span.offset + span.length).toBeLessThanOrEqual(region.length);
      expect(t.to('cpu').equals(host)).toBe(true);
      expect(pool.stats()).toMatchObject({ device, liveTensors: 1, used: 3 * MiB + 256 });
      expectCode(() => pool.allocate([6 * MiB], 'u8'), 'RESOURCE_EXHAUSTED');
      t.release();
      expect(pool.stats()).toMatchObject({ liveTensors: 0, used: 0 });
    } finally {
      pool.close({ force: true });
    }
    expect(nativeStats().regions).toBe(regionsBefore);
  });

  it('a pool on a context whose UCX cannot register CUDA memory is staged, and still works', () => {
    // Without CUDA transports, UCX 1.22 reports only 'host' memory (measured on the H200).
    const hostOnly = Context.create({ config: { TLS: 'tcp,self' } });
    const pool = TensorPool.create(hostOnly, { device: 'cuda:0', bytes: MiB, allowOverflow: true });
    try {
      expect(hostOnly.memoryTypes()).not.toContain('cuda');
      expect(pool.staged).toBe(true);
      expect(pool.stagingReason).toMatch(/cannot register CUDA memory/);
      expect(pool.region).toBeUndefined();
      const host = randomHost(4097);
      const t = host.to('cuda:0', { pool });
      expect(t.span()).toBeUndefined();
      expect(cuda.pointerInfo(t.address).memoryType).toBe('cuda');
      expect(t.to('cpu').equals(host)).toBe(true);
      const overflow = pool.allocate([2 * MiB], 'u8');
      expect(overflow.span()).toBeUndefined();
      expect(pool.stats()).toMatchObject({ liveTensors: 2, overflowRegistrations: 1 });
    } finally {
      pool.close({ force: true });
      hostOnly.close();
    }
  });

  it('a pinned host pool is page-locked, mapped by UCX as host memory, and stages to the GPU', () => {
    const pool = TensorPool.create(context, { device: 'cpu', bytes: 2 * MiB, pinned: true, allowOverflow: true });
    try {
      expect(pool.pinned).toBe(true);
      expect(pool.region!.memoryType).toBe('host');
      const pageable = randomHost(MiB);
      expect(cuda.pointerInfo(pageable.address).memoryType).toBe('unregistered');
      const staging = pageable.to('cpu', { pool });
      expect(cuda.pointerInfo(staging.address).memoryType).toBe('host');  // known to the driver: page-locked
      expect(staging.span()!.region).toBe(pool.region);
      const onGpu = staging.to('cuda:0');
      expect(onGpu.to('cpu', { pool }).equals(pageable)).toBe(true);
      const overflow = pool.allocate([3 * MiB], 'u8');
      expect(cuda.pointerInfo(overflow.address).memoryType).toBe('host');
      onGpu.release();
    } finally {
      pool.close({ force: true });
    }
  });

  it('a CUDA pool with allowOverflow registers CUDA memory for the overflow', () => {
    const pool = TensorPool.create(context, { device: 'cuda:0', bytes: MiB, allowOverflow: true });
    try {
      const big = pool.allocate([2 * MiB], 'u8');
      expect(pool.stats().overflowRegistrations).toBe(1);
      expect(big.span()!.region.memoryType).toBe('cuda');
      expect(big.span()!.region).not.toBe(pool.region);
      const host = randomHost(2 * MiB);
      const copy = host.to('cuda:0', { pool });
      expect(pool.stats().overflowRegistrations).toBe(2);
      expect(copy.equals(host)).toBe(true);
    } finally {
      pool.close({ force: true });
    }
  });

  it.skipIf(pairs.length === 0).each(pairs)('copies %s -> %s exactly, pooled and unpooled', (from, to) => {
    const host = randomHost(5 * MiB + 7);
    const source = host.to(from);
    const direct = source.to(to);
    expect(direct.device).toBe(to);
    expect(cuda.pointerInfo(direct.address).device).toBe(Number(to.slice(5)));
    expect(direct.to('cpu').equals(host)).toBe(true);
    const pool = TensorPool.create(context, { device: to, bytes: 8 * MiB });
    try {
      const pooled = source.to(to, { pool });
      expect(pooled.span()!.region.memoryType).toBe('cuda');
      expect(pooled.equals(host)).toBe(true);
    } finally {
      pool.close({ force: true });
    }
    source.release();
    direct.release();
  });
});
