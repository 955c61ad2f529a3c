// BlockCopier's GPU paths without a GPU: a fake driver (test/support/fake-gpu.ts) keeps device
// memory in host buffers and emulates gdrpc_copy_indexed and gdrpc_copy_blocks from
// native/kernels/gdrpc.cu, recording every access outside an allocation. The real kernels run in
// test/gpu/blocks.test.ts on a GPU machine.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Code, Tensor } from '../../core/index.ts';
import { BlockCopier, type BlockCopies, type BlockCopy, type BlockTable } from '../../core/compute/blocks.ts';
import { CudaStream } from '../../core/compute/stream.ts';
import { producedOn } from '../../core/compute/ready.ts';
import { GdrpcError } from '../../core/errors.ts';
import { installFakeGpu, type FakeGpu } from '../support/fake-gpu.ts';

let gpu: FakeGpu;
beforeAll(() => { gpu = installFakeGpu(); });
afterAll(() => gpu.restore());

/** xorshift32: the same numbers every run. */
function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x; };
}

function filled(bytes: number, seed: number, device: 'cpu' | `cuda:${number}`): Tensor {
  const r = rng(seed);
  const data = Uint8Array.from({ length: bytes }, () => r() & 0xff);
  const host = Tensor.fromArray(data);
  return device === 'cpu' ? host : host.to(device);
}
const bytesOf = (t: Tensor): Buffer => Buffer.from(t.device === 'cpu' ? t.bytes() : t.to('cpu').bytes());

async function reason(p: Promise<unknown>): Promise<GdrpcError> {
  try { await p; } catch (error) { return error as GdrpcError; }
  throw new Error('expected a rejection');
}

describe('gdrpc_copy_indexed (emulated) against the host path', () => {
  it.each([
    [1, 37], [15, 20], [16, 33], [48, 9], [(256 << 10) + 1, 3], [(256 << 10) + 16, 2], [600_003, 2],
  ])('blockBytes %i, %i blocks asked, lists given, left out, permuted and repeated on the src side', async (blockBytes, count) => {
    const copier = new BlockCopier();
    const r = rng(blockBytes * 31 + count);
    // Tensors that are not a whole number of blocks (a tail the checks must leave alone).
    const srcBlocksHeld = count + 2;
    const dstBlocksHeld = count + 1;
    const srcBytes = srcBlocksHeld * blockBytes + 7;
    const dstBytes = dstBlocksHeld * blockBytes + 3;
    const srcBlocks = Uint32Array.from({ length: count }, () => r() % srcBlocksHeld);
    const perm = Array.from({ length: dstBlocksHeld }, (_, i) => i).sort(() => (r() & 1) - 0.5);
    const dstBlocks = Uint32Array.from(perm.slice(0, count));
    for (const shape of [{ dstBlocks, srcBlocks }, { srcBlocks }, { dstBlocks }, {}] as Array<Partial<BlockTable>>) {
      const hostSrc = filled(srcBytes, 1, 'cpu');
      const hostDst = filled(dstBytes, 2, 'cpu');
      await copier.copy(blockBytes, { dst: hostDst, src: hostSrc, count, ...shape });
      const devSrc = filled(srcBytes, 1, 'cuda:0');
      const devDst = filled(dstBytes, 2, 'cuda:0');
      const before = gpu.launches.length;
      await copier.copy(blockBytes, { dst: devDst, src: devSrc, count, ...shape }, { sourcesReady: true });
      expect(gpu.launches.length).toBe(before + 1);
      const launch = gpu.launches.at(-1)!;
      expect(launch.kernel).toBe('gdrpc_copy_indexed');
      const pieces = Math.ceil(blockBytes / Math.min(blockBytes, 256 << 10));
      expect(launch.grid[0]).toBe(Math.min(count * pieces, 65535));
      expect(Buffer.compare(bytesOf(devDst), bytesOf(hostDst))).toBe(0);
      // Mixed: a GPU source into a host tensor, and two GPUs (cuMemcpy per block).
      const mixedDst = filled(dstBytes, 2, 'cpu');
      await copier.copy(blockBytes, { dst: mixedDst, src: devSrc, count, ...shape }, { sourcesReady: true });
      expect(Buffer.compare(bytesOf(mixedDst), bytesOf(hostDst))).toBe(0);
      const otherGpu = filled(dstBytes, 2, 'cuda:1');
      await copier.copy(blockBytes, { dst: otherGpu, src: devSrc, count, ...shape }, { sourcesReady: true });
      expect(Buffer.compare(bytesOf(otherGpu), bytesOf(hostDst))).toBe(0);
    }
    copier.close();
    expect(gpu.violations).toEqual([]);
  });

  it('the last block that fits is copied; one past it is refused before any launch (blockBytes not dividing the tensor)', async () => {
    const copier = new BlockCopier();
    const src = filled(10 * 24 + 23, 5, 'cuda:0');   // 10 whole blocks of 24, then 23 bytes
    const dst = filled(24 * 2, 6, 'cuda:0');
    await copier.copy(24, { dst, src, srcBlocks: Uint32Array.of(9, 0), count: 2 }, { sourcesReady: true });
    const launches = gpu.launches.length;
    for (const table of [
      { dst, src, srcBlocks: Uint32Array.of(0, 10), count: 2 },
      { dst, dstBlocks: Uint32Array.of(2, 0), src, count: 2 },
      { dst, src, srcBlocks: Uint32Array.of(0xffffffff, 0), count: 2 },
      { dst, src, count: 3 },
      { dst: filled(16, 1, 'cuda:0'), src, count: 1 },           // blockBytes larger than a tensor
    ]) {
      const error = await reason(copier.copy(24, table, { sourcesReady: true }));
      expect(error).toBeInstanceOf(GdrpcError);
      expect(error.code).toBe(Code.INVALID_ARGUMENT);
    }
    for (const [bytes, table] of [[NaN, { dst, src, count: 1 }], [24, { dst, src, count: -1 }], [24, { dst, src, count: 2 ** 32 }], [24, { dst, src, count: 2 ** 28 + 1 }], [24, { dst, src, count: NaN }], [2.5, { dst, src, count: 1 }]] as Array<[number, BlockTable]>) {
      const error = await reason(copier.copy(bytes, table));
      expect(error).toBeInstanceOf(GdrpcError);
      expect(error.code).toBe(Code.INVALID_ARGUMENT);
    }
    expect(gpu.launches.length).toBe(launches);
    copier.close();
    expect(gpu.violations).toEqual([]);
  });

  it('a tensor released while the copy waits its turn, or a refusing `before`, stops it before the launch', async () => {
    const copier = new BlockCopier();
    const src = filled(64, 5, 'cuda:0');
    const dst = filled(64, 6, 'cuda:0');
    const launches = gpu.launches.length;
    const first = copier.copy(16, { dst, src, count: 4 }, { sourcesReady: true });
    const second = copier.copy(16, { dst, src, count: 4 }, { sourcesReady: true });
    src.release();
    const errors = await Promise.all([reason(first), reason(second)]);
    for (const error of errors) {
      expect(error.code).toBe(Code.INVALID_ARGUMENT);
      expect(error.message).toMatch(/table's src was released while the copy waited its turn/);
    }
    const other = filled(64, 5, 'cuda:0');
    const refused = await reason(copier.copy(16, { dst, src: other, count: 4 }, { before: () => { throw new GdrpcError(Code.NOT_FOUND, 'gone'); } }));
    expect(refused.code).toBe(Code.NOT_FOUND);
    expect(gpu.launches.length).toBe(launches);
    copier.close();
    expect(gpu.violations).toEqual([]);
  });
});

describe('a list of copies waiting its turn', () => {
  it('is refused when a tensor it names is released meanwhile, naming the first entry that names it', async () => {
    const copier = new BlockCopier();
    const a = filled(64, 3, 'cuda:0');
    const b = filled(64, 4, 'cuda:0');
    const dst = Tensor.zeros([128], 'u8', { device: 'cuda:0' });
    const launches = gpu.launches.length;
    const first = copier.copy(64, [{ dst, dstOffset: 0, src: a, srcOffset: 0 }], { sourcesReady: true });
    const second = copier.copy(64, [{ dst, dstOffset: 0, src: a, srcOffset: 0 }, { dst, dstOffset: 64, src: b, srcOffset: 0 }], { sourcesReady: true });
    b.release();
    expect(await settleIt(first)).toBeUndefined();
    const error = await reason(second);
    expect(error.code).toBe(Code.INVALID_ARGUMENT);
    expect(error.message).toMatch(/copies\[1\] names a tensor released while the copy waited its turn/);
    expect(gpu.launches.length).toBe(launches + 1);
    copier.close();
    expect(gpu.violations).toEqual([]);
  });
});

describe('the mixed path (a GPU source into host memory)', () => {
  it('waits for a source\'s producer once, not once per block', async () => {
    const copier = new BlockCopier();
    const src = filled(64 * 16, 1, 'cuda:0');
    producedOn(src, CudaStream.create(0));
    const dst = Tensor.zeros([64 * 16], 'u8');
    const before = gpu.calls.eventSynchronize ?? 0;
    await copier.copy(16, { dst, src, count: 64 });
    expect((gpu.calls.eventSynchronize ?? 0) - before).toBe(1);
    expect(Buffer.compare(dst.bytes(), bytesOf(src))).toBe(0);
    copier.close();
  });
});

async function settleIt(p: Promise<unknown>): Promise<unknown> {
  try { await p; return undefined; } catch (error) { return error; }
}

describe('a list or table changed after copy() returned, before its turn on the GPU', () => {
  // The turn comes a microtask or more later (behind other copies on the GPU, at least): what is
  // launched is what was checked, whatever the caller does to its objects meanwhile. Each case
  // makes the copies of 4 blocks of 64 bytes from src to dst, then changes them.
  const cases: Array<[string, (dst: Tensor, src: Tensor) => BlockCopies, (copies: BlockCopies) => void]> = [
    ['an index raised past the tensor', (dst, src) => ({ dst, dstBlocks: Uint32Array.of(0, 1, 2, 3), src, count: 4 }),
      (copies) => { (copies as BlockTable).dstBlocks![3] = 1_000_000; }],  // the caller refilling its index buffer
    ['a count raised', (dst, src) => ({ dst, src, count: 4 }), (copies) => { (copies as BlockTable).count = 400; }],
    ['a dst swapped for a smaller tensor', (dst, src) => ({ dst, src, count: 4 }),
      (copies) => { (copies as BlockTable).dst = Tensor.zeros([64], 'u8', { device: 'cuda:0' }); }],
    ['an offset of a list', (dst, src) => [0, 1, 2, 3].map((k) => ({ dst, dstOffset: k * 64, src, srcOffset: k * 64 })),
      (copies) => { (copies as BlockCopy[])[3]!.dstOffset = 64_000_000; }],
  ];

  it.each(cases)('%s afterwards is not what is launched, and nothing else is written', async (_name, make, change) => {
    const copier = new BlockCopier();
    const src = filled(4 * 64, 9, 'cuda:0');
    const dst = Tensor.zeros([4 * 64], 'u8', { device: 'cuda:0' });
    const copies = make(dst, src);
    gpu.violations.length = 0;
    const copying = copier.copy(64, copies, { sourcesReady: true });
    change(copies);
    expect(await settleIt(copying)).toBeUndefined();
    copier.close();
    expect(gpu.violations).toEqual([]);
    expect(Buffer.compare(bytesOf(dst), bytesOf(src))).toBe(0);
    // A tensor swapped in afterwards is left as it was.
    const swapped = Array.isArray(copies) ? undefined : (copies as BlockTable).dst;
    if (swapped !== undefined && swapped !== dst) expect(bytesOf(swapped).every((b) => b === 0)).toBe(true);
  });
});
