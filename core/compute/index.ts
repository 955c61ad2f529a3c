// Public surface of core/compute: streams, events, PTX modules, kernel launches, stream-ordered
// tensors, and gdrpc's own kernels with their host twins.
export { CudaEvent, CudaStream } from './stream.ts';
export { CudaKernel, CudaModule, type Dim3, type KernelArg, type KernelParam, type LaunchShape } from './module.ts';
export { producedOn, readyAfter } from './ready.ts';
export { BlockCopier, copyBlocks, type BlockCopies, type BlockCopy, type BlockTable } from './blocks.ts';
export type { GemmOptions, Kernels } from './contract.ts';
export { kernelsPtxPath, loadKernels } from './kernels.ts';
export { checksum as hostChecksum } from './host.ts';
