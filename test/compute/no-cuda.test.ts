// Without a usable CUDA driver every compute entry point fails FAILED_PRECONDITION with the reason
// (the same as the rest of the CUDA shim); the host kernels stay usable. Skips where CUDA works
// (test/gpu/compute.test.ts covers that side).
import { describe, expect, it } from 'vitest';
import { Code, cuda, CudaEvent, CudaModule, CudaStream, hostChecksum, loadKernels, Tensor } from '../../core/index.ts';
import { thrown } from '../rpc/fixtures/thrown.ts';

const skip = cuda.available() ? 'CUDA is available here (test/gpu/compute.test.ts runs instead)' : undefined;
if (skip !== undefined) console.log(`test/compute/no-cuda.test.ts skipped: ${skip}`);

describe.skipIf(skip !== undefined)('compute without CUDA', () => {
  it.each([
    ['CudaStream.create', () => CudaStream.create(0)],
    ['CudaEvent.create', () => CudaEvent.create(0, { timing: true })],
    ['CudaModule.load', () => CudaModule.load(0, '.version 8.0\n')],
    ['loadKernels', () => loadKernels('cuda:0')],
  ])('%s: FAILED_PRECONDITION with the reason', (_name, call) => {
    const error = thrown(call);
    expect(error.code).toBe(Code.FAILED_PRECONDITION);
    expect(error.message).toContain('CUDA is unavailable');
    expect(error.message).toContain(cuda.unavailableReason()!);
  });

  it('the host kernels still work', async () => {
    const kernels = loadKernels('cpu');
    const t = Tensor.zeros([64], 'f16');
    kernels.fill(t, { seed: 5 });
    expect(await kernels.checksum(t)).toBe(hostChecksum(t.bytes()));
    expect(hostChecksum(t.bytes())).not.toBe(hostChecksum(new Uint8Array(128)));
  });
});
