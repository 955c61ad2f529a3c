// copyBlocks on a GPU (the gather and scatter of RemoteTensor.pullAll's stacked batches): one
// launch of gdrpc_copy_blocks for blocks on one GPU, 16-byte and byte-wise paths, a source still
// being written on another stream, and the block-by-block path between host and GPU. Host side:
// test/compute/blocks.test.ts.
import { describe, expect, it } from 'vitest';
import { BlockCopier, Code, copyBlocks, cuda, CudaEvent, CudaModule, CudaStream, kernelsPtxPath, loadKernels, producedOn, Tensor } from '../../core/index.ts';
import { rejection } from '../rpc/fixtures/thrown.ts';
import { readFileSync } from 'node:fs';
import { announce, DRY_RUN, skipReason } from './fixtures/env.ts';

announce('test/gpu/blocks.test.ts');
const skip = skipReason ?? (DRY_RUN ? 'the dry run has no GPU (test/compute/blocks.test.ts runs the host path)' : undefined);
if (skip !== undefined) console.log(`test/gpu/blocks.test.ts skipped: ${skip}`);

/** Host block k of `bytes` bytes: (k * 131 + i * 7) & 0xff. */
function hostBlock(k: number, bytes: number): Tensor {
  return Tensor.fromArray(Uint8Array.from({ length: bytes }, (_, i) => (k * 131 + i * 7) & 0xff));
}

describe.skipIf(skip !== undefined)('copyBlocks on cuda:0', () => {
  it.each([
    ['1,024 blocks of 32 KiB (16-byte copies)', 1024, 32 << 10],
    ['300 blocks of 4,099 bytes (byte copies)', 300, 4099],
    ['3 blocks of 16 MiB (64 pieces each)', 3, 16 << 20],
    ['2 blocks of 1 MiB + 1 byte (17 pieces each, byte copies)', 2, (1 << 20) + 1],
    ['3 blocks of 2,097,169 bytes (a prime: 8 pieces of 256 KiB and a 17-byte tail)', 3, 2_097_169],
  ])('gathers and scatters %s, every byte in place', async (_name, count, bytes) => {
    const parts = Array.from({ length: count }, (_, k) => hostBlock(k, bytes));
    const onGpu = parts.map((p) => p.to('cuda:0'));
    const stacked = Tensor.empty([count, bytes], 'u8', { device: 'cuda:0' });
    const out = Array.from({ length: count }, () => Tensor.zeros([bytes], 'u8', { device: 'cuda:0' }));
    try {
      await copyBlocks(bytes, onGpu.map((src, k) => ({ dst: stacked, dstOffset: k * bytes, src, srcOffset: 0 })));
      const back = stacked.to('cpu');
      for (const k of [0, 1, count >> 1, count - 1]) expect(Buffer.compare(back.bytes().subarray(k * bytes, (k + 1) * bytes), parts[k]!.bytes()), `block ${k}`).toBe(0);
      expect(Buffer.compare(back.bytes(), Buffer.concat(parts.map((p) => p.bytes())))).toBe(0);
      // Scatter in reverse: each block goes where its entry says.
      await copyBlocks(bytes, out.map((dst, k) => ({ dst, dstOffset: 0, src: stacked, srcOffset: (count - 1 - k) * bytes })));
      for (const k of [0, Math.min(7, count - 1), count - 1]) expect(out[k]!.to('cpu').equals(parts[count - 1 - k]!), `out ${k}`).toBe(true);
    } finally {
      for (const t of [...onGpu, ...out, stacked]) t.release();
    }
  });

  it.each([
    ['4,096 blocks of 32 KiB (16-byte copies)', 4096, 32 << 10],
    ['300 blocks of 4,099 bytes (byte copies)', 300, 4099],
    ['3 blocks of 16 MiB (64 pieces each)', 3, 16 << 20],
    ['3 blocks of 2,097,169 bytes (a prime: 8 pieces of 256 KiB and a 17-byte tail)', 3, 2_097_169],
  ])('copies a block table of %s by index (gdrpc_copy_indexed), every byte in place', async (_name, count, bytes) => {
    // The host twin of the same table is the reference: block srcBlocks[k] to block dstBlocks[k].
    const hostSrc = Tensor.fromArray(Uint8Array.from({ length: count * bytes }, (_, i) => (Math.floor(i / bytes) * 131 + i * 7) & 0xff));
    const srcBlocks = Uint32Array.from({ length: count }, (_, k) => (k * 7 + 3) % count);
    const dstBlocks = Uint32Array.from({ length: count }, (_, k) => count - 1 - k);
    const expected = Tensor.zeros([count * bytes], 'u8');
    await copyBlocks(bytes, { dst: expected, dstBlocks, src: hostSrc, srcBlocks, count });
    const src = hostSrc.to('cuda:0');
    const dst = Tensor.zeros([count * bytes], 'u8', { device: 'cuda:0' });
    const gathered = Tensor.zeros([count * bytes], 'u8', { device: 'cuda:0' });
    try {
      await copyBlocks(bytes, { dst, dstBlocks, src, srcBlocks, count });
      expect(Buffer.compare(dst.to('cpu').bytes(), expected.bytes())).toBe(0);
      // In order on the destination side (a gather), then on the source side (a scatter back).
      await copyBlocks(bytes, { dst: gathered, src, srcBlocks, count });
      const back = gathered.to('cpu');
      for (const k of [0, 1, count >> 1, count - 1]) {
        expect(Buffer.compare(back.bytes().subarray(k * bytes, (k + 1) * bytes), hostSrc.bytes().subarray(srcBlocks[k]! * bytes, (srcBlocks[k]! + 1) * bytes)), `block ${k}`).toBe(0);
      }
      await copyBlocks(bytes, { dst, dstBlocks: srcBlocks, src: gathered, count });
      expect(Buffer.compare(dst.to('cpu').bytes(), hostSrc.bytes()), 'scattered back to where each block came from').toBe(0);
    } finally {
      for (const t of [src, dst, gathered]) t.release();
    }
  });

  it('waits for a source still being written on another stream (producedOn)', async () => {
    const module = CudaModule.load(0, readFileSync(kernelsPtxPath()));
    const spin = module.kernel('gdrpc_spin', ['u64']);
    const stream = CudaStream.create(0);
    const src = Tensor.zeros([1 << 20], 'f16', { device: 'cuda:0' });
    const dst = Tensor.zeros([1 << 20], 'f16', { device: 'cuda:0' });
    const expected = Tensor.zeros([1 << 20], 'f16');
    try {
      loadKernels('cpu').fill(expected, { seed: 5 });
      // 200 ms of spinning on `stream` before the fill: a copy that did not wait would see zeros.
      spin.launch({ grid: 1, block: 1, stream }, 200_000_000);
      const filler = loadKernels('cuda:0', { stream });
      filler.fill(src, { seed: 5 });
      producedOn(src, stream);
      await copyBlocks(src.byteLength, [{ dst, dstOffset: 0, src, srcOffset: 0 }]);
      expect(dst.to('cpu').equals(expected)).toBe(true);
      filler.close();
    } finally {
      for (const t of [src, dst]) t.release();
      stream.close();
      module.close();
    }
  });

  it('with sourcesReady, does not wait for unrelated work on the device (no device-wide synchronize)', { timeout: 60_000 }, async () => {
    const module = CudaModule.load(0, readFileSync(kernelsPtxPath()));
    const spin = module.kernel('gdrpc_spin', ['u64']);
    const busy = CudaStream.create(0);
    const parts = Array.from({ length: 8 }, (_, k) => hostBlock(k, 4096).to('cuda:0'));
    const stacked = Tensor.zeros([8, 4096], 'u8', { device: 'cuda:0' });
    const copier = new BlockCopier();
    try {
      const copies = parts.map((src, k) => ({ dst: stacked, dstOffset: k * 4096, src, srcOffset: 0 }));
      // The copier's first use loads its module, which waits for the device: done before the spin.
      await copier.copy(4096, copies, { sourcesReady: true });
      cuda.synchronize(0);  // the sources are complete from here on
      // Seconds of unrelated work on another stream: a device-wide synchronize would wait for it.
      spin.launch({ grid: 1, block: 1, stream: busy }, 4_000_000_000);
      const unrelated = CudaEvent.create(0).record(busy);
      const zeros = Tensor.zeros([8, 4096], 'u8');
      stacked.copyFrom(zeros);
      zeros.release();
      await copier.copy(4096, copies, { sourcesReady: true });
      const spinning = !unrelated.done;
      expect(Buffer.compare(stacked.to('cpu').bytes(), Buffer.concat(parts.map((p) => p.to('cpu').bytes())))).toBe(0);
      // The copy was in place while the spin still ran (it would have waited seconds otherwise).
      expect(spinning).toBe(true);
      await unrelated.finished();
      unrelated.close();
    } finally {
      copier.close();
      for (const t of [...parts, stacked]) t.release();
      busy.close();
      module.close();
    }
  });

  it('refuses a copy whose tensor was released while it waited its turn, and runs its before check then', { timeout: 60_000 }, async () => {
    const module = CudaModule.load(0, readFileSync(kernelsPtxPath()));
    const spin = module.kernel('gdrpc_spin', ['u64']);
    const producer = CudaStream.create(0);
    const copier = new BlockCopier();
    const [a, b, c, d, e, f] = Array.from({ length: 6 }, () => Tensor.zeros([4096], 'u8', { device: 'cuda:0' }));
    try {
      await copier.copy(4096, [{ dst: b!, dstOffset: 0, src: a!, srcOffset: 0 }], { sourcesReady: true });  // loads the kernel
      // The first copy waits 300 ms for its source's producer; the others queue behind it.
      spin.launch({ grid: 1, block: 1, stream: producer }, 300_000_000);
      producedOn(a!, producer);
      const first = copier.copy(4096, [{ dst: b!, dstOffset: 0, src: a!, srcOffset: 0 }]);
      const released = copier.copy(4096, [{ dst: d!, dstOffset: 0, src: c!, srcOffset: 0 }], { sourcesReady: true });
      let checked = false;
      const refusedByCheck = copier.copy(4096, [{ dst: f!, dstOffset: 0, src: e!, srcOffset: 0 }], { sourcesReady: true, before: () => { checked = true; throw new Error('no longer exposed'); } });
      c!.release();
      expect(checked).toBe(false);  // not before its turn
      await first;
      const error = await rejection(released);
      expect(error.code).toBe(Code.INVALID_ARGUMENT);
      expect(error.rawMessage).toMatch(/copies\[0\] names a tensor released while the copy waited its turn/);
      await expect(refusedByCheck).rejects.toThrow('no longer exposed');
      expect(checked).toBe(true);
    } finally {
      copier.close();
      for (const t of [a, b, d, e, f]) t!.release();
      producer.close();
      module.close();
    }
  });

  it('copies between host and GPU block by block (two kinds of memory in one call)', async () => {
    const parts = Array.from({ length: 9 }, (_, k) => hostBlock(k, 1000));
    const stacked = Tensor.zeros([9, 1000], 'u8', { device: 'cuda:0' });
    try {
      await copyBlocks(1000, parts.map((src, k) => ({ dst: stacked, dstOffset: k * 1000, src, srcOffset: 0 })));
      expect(Buffer.compare(stacked.to('cpu').bytes(), Buffer.concat(parts.map((p) => p.bytes())))).toBe(0);
      const out = parts.map(() => Tensor.zeros([1000], 'u8'));
      await copyBlocks(1000, out.map((dst, k) => ({ dst, dstOffset: 0, src: stacked, srcOffset: k * 1000 })));
      expect(out.map((t, k) => t.equals(parts[k]!))).toEqual(new Array(9).fill(true));
    } finally {
      stacked.release();
    }
  });
});
