import { afterEach, describe, expect, it, vi } from 'vitest';
import { cuda } from '../../core/cuda.ts';
import { cudaAlloc, cudaAllocationBytes, CUDA_LARGE_PAGE } from '../../core/tensor/storage.ts';

const MiB = 1 << 20;
const GiB = 1 << 30;

describe('cudaAllocationBytes', () => {
  it('asks for whole 2 MiB units from one unit up', () => {
    expect(CUDA_LARGE_PAGE).toBe(2 * MiB);
    expect(cudaAllocationBytes(2 * MiB)).toBe(2 * MiB);
    expect(cudaAllocationBytes(2 * MiB + 1)).toBe(4 * MiB);
    // A pool's arena as the GPU bench makes it: the largest tensor, 1 MiB more, 255 bytes of alignment.
    expect(cudaAllocationBytes(GiB + MiB + 255)).toBe(GiB + 2 * MiB);
    expect(cudaAllocationBytes(GiB)).toBe(GiB);
    expect(cudaAllocationBytes(GiB + 1)).toBe(GiB + 2 * MiB);
  });

  it('leaves sizes below one unit as they are', () => {
    for (const bytes of [0, 1, 256, 4096 + 255, 2 * MiB - 1]) expect(cudaAllocationBytes(bytes)).toBe(bytes);
  });

  it('never asks for fewer bytes than requested, and rounds by less than one unit', () => {
    for (let bytes = 2 * MiB - 3; bytes < 64 * MiB; bytes += 999_983) {
      const asked = cudaAllocationBytes(bytes);
      expect(asked).toBeGreaterThanOrEqual(bytes);
      expect(asked - bytes).toBeLessThan(CUDA_LARGE_PAGE);
      if (bytes >= CUDA_LARGE_PAGE) expect(asked % CUDA_LARGE_PAGE).toBe(0);
    }
  });
});

describe('cudaAlloc', () => {
  afterEach(() => vi.restoreAllMocks());

  it('asks the driver for the rounded size and reports a failure with the size asked by the caller', () => {
    const alloc = vi.spyOn(cuda, 'alloc').mockReturnValue(0x1000n);
    expect(cudaAlloc(0, GiB + MiB + 255)).toBe(0x1000n);
    expect(alloc).toHaveBeenCalledWith(0, GiB + 2 * MiB);
    expect(cudaAlloc(1, 4096)).toBe(0x1000n);
    expect(alloc).toHaveBeenLastCalledWith(1, 4096);
    alloc.mockImplementation(() => { throw new Error('out of memory'); });
    expect(() => cudaAlloc(0, 3 * MiB)).toThrow(/RESOURCE_EXHAUSTED.*cannot allocate 3145728 bytes on cuda:0: out of memory/);
  });
});
