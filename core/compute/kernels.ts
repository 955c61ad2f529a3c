// gdrpc's own kernels (native/kernels/gdrpc.cu, committed as PTX) behind one interface with two
// backends: the GPU (launched on a stream) and the host (core/compute/host.ts, the same answers
// computed in TypeScript), so that a program written against Kernels runs with and without a GPU.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Code, GdrpcError } from '../errors.ts';
import { cuda } from '../cuda.ts';
import { packageRoot } from '../package-root.ts';
import { parseDevice, type Device, type Tensor } from '../tensor/index.ts';
import { invalid } from '../ucx/check.ts';
import { checkAdd, checkFill, checkGemm, checkOn, type GemmOptions, type Kernels } from './contract.ts';
import { hostKernels } from './host.ts';
import { CudaModule, type CudaKernel } from './module.ts';
import { producedOn } from './ready.ts';
import { checkStream, CudaStream } from './stream.ts';

/** Where the PTX of the project's kernels lives (in the repository and in the installed package). */
export function kernelsPtxPath(): string {
  return join(packageRoot(), 'native', 'kernels', 'gdrpc.ptx');
}

/** The project's kernels on `device` ('cpu': the host twins). A GPU backend queues its work on
 *  `options.stream`, or on a stream of its own. */
export function loadKernels(device: Device, options: { stream?: CudaStream } = {}): Kernels {
  const parsed = parseDevice(device, 'loadKernels device');
  if (parsed.kind === 'cpu') {
    if (options.stream !== undefined) throw invalid('loadKernels: a stream needs a CUDA device');
    return hostKernels();
  }
  if (options.stream !== undefined) {
    checkStream(options.stream, 'loadKernels options.stream');
    if (options.stream.device !== parsed.index) throw invalid(`loadKernels: a stream of cuda:${options.stream.device} for cuda:${parsed.index}`);
  }
  return new GpuKernels(parsed.index!, CudaModule.load(parsed.index!, readKernelsPtx()), options.stream);
}

/** The project's PTX; FAILED_PRECONDITION saying how to build it when it is missing. */
export function readKernelsPtx(): Uint8Array {
  try {
    return readFileSync(kernelsPtxPath());
  } catch (error) {
    throw new GdrpcError(Code.FAILED_PRECONDITION, `the kernels' PTX is missing (${kernelsPtxPath()}): run scripts/build-ptx.sh where nvcc is`, { cause: error });
  }
}

const THREADS = 256;
/** Grid-stride kernels need no more blocks than this to fill any current GPU. */
const MAX_BLOCKS = 65535;
/** Rows and columns per block of the tiled gemm; at most SMALL_M rows take the split-K one. */
const TILE_M = 64;
const TILE_N = 64;
const SMALL_M = 16;
/** Split-K gemm: columns per block, the longest K slice a block takes, and about how many blocks
 *  to aim for (several per SM of a large GPU: each streams its slice of B). */
const SPLIT_COLS = 128;
const MAX_SLICE = 256;
const TARGET_BLOCKS = 1024;

class GpuKernels implements Kernels {
  readonly device: Device;
  readonly stream: CudaStream;
  readonly #ownsStream: boolean;
  readonly #fill: CudaKernel;
  readonly #fillBf16: CudaKernel;
  readonly #add: CudaKernel;
  readonly #checksum: CudaKernel;
  readonly #gemm: CudaKernel;
  readonly #splitK: CudaKernel;
  readonly #splitKEpilogue: CudaKernel;
  /** f32 partial sums of split-K products, grown on demand (ws[slice][m][n]). */
  #workspace: { ptr: bigint; bytes: number } | undefined;

  constructor(readonly index: number, readonly module: CudaModule, stream: CudaStream | undefined) {
    this.device = `cuda:${index}`;
    this.#ownsStream = stream === undefined;
    this.stream = stream ?? CudaStream.create(index);
    this.#fill = module.kernel('gdrpc_fill_f16', ['ptr', 'u64', 'u32', 'f32']);
    this.#fillBf16 = module.kernel('gdrpc_fill_bf16', ['ptr', 'u64', 'u32', 'f32']);
    this.#add = module.kernel('gdrpc_add_f16', ['ptr', 'ptr', 'ptr', 'u64']);
    this.#checksum = module.kernel('gdrpc_checksum', ['ptr', 'u64', 'ptr']);
    this.#gemm = module.kernel('gdrpc_gemm_f16', ['ptr', 'ptr', 'ptr', 'ptr', 'ptr', 'i32', 'i32', 'i32', 'i32']);
    this.#splitK = module.kernel('gdrpc_gemm_f16_splitk', ['ptr', 'ptr', 'ptr', 'i32', 'i32', 'i32', 'i32']);
    this.#splitKEpilogue = module.kernel('gdrpc_gemm_f16_splitk_epilogue', ['ptr', 'i32', 'ptr', 'ptr', 'ptr', 'i32', 'i32', 'i32']);
  }

  fill(out: Tensor, options: { seed: number; scale?: number }): void {
    const { seed, scale } = checkFill(out, options, this.device);
    if (out.numel === 0) return;
    (out.dtype === 'bf16' ? this.#fillBf16 : this.#fill).launch(this.#shape(out.numel), out, out.numel, seed, scale);
    producedOn(out, this.stream);
  }

  add(out: Tensor, a: Tensor, b: Tensor): void {
    checkAdd(out, a, b, this.device);
    if (out.numel === 0) return;
    this.#add.launch(this.#shape(out.numel), out, a, b, out.numel);
    producedOn(out, this.stream);
  }

  gemm(out: Tensor, a: Tensor, b: Tensor, options: GemmOptions = {}): void {
    const { m, n, k } = checkGemm(out, a, b, options, this.device);
    if (m === 0 || n === 0) return;
    const bias = options.bias ?? null;
    const residual = options.residual ?? null;
    const relu = options.relu === true ? 1 : 0;
    if (m <= SMALL_M && k > 0) {
      const columns = Math.ceil(n / SPLIT_COLS);
      const slice = Math.min(MAX_SLICE, Math.max(8, Math.ceil(k / Math.ceil(TARGET_BLOCKS / columns) / 8) * 8));
      const slices = Math.ceil(k / slice);
      const ws = this.#workspaceOf(slices * m * n * 4);
      this.#splitK.launch({ grid: [columns, slices], block: THREADS, stream: this.stream }, a, b, ws, m, n, k, slice);
      this.#splitKEpilogue.launch(this.#shape(m * n), ws, slices, out, bias, residual, m, n, relu);
    } else {
      this.#gemm.launch({ grid: [Math.ceil(n / TILE_N), Math.ceil(m / TILE_M)], block: THREADS, stream: this.stream }, a, b, out, bias, residual, m, n, k, relu);
    }
    producedOn(out, this.stream);
  }

  async checksum(tensor: Tensor): Promise<bigint> {
    checkOn(tensor, 'checksum tensor', this.device);
    const sum = cuda.alloc(this.index, 8);
    try {
      cuda.memset(sum, 0, 8);
      if (tensor.byteLength > 0) this.#checksum.launch(this.#shape(Math.ceil(tensor.byteLength / 4)), tensor, tensor.byteLength, sum);
      await this.stream.finished();
      const host = new BigUint64Array(1);
      cuda.copy(host, sum, 8);
      return host[0]!;
    } finally {
      cuda.free(sum);
    }
  }

  finished(): Promise<void> { return this.stream.finished(); }

  /** The split-K workspace, at least `bytes` long (a smaller one is freed first). */
  #workspaceOf(bytes: number): bigint {
    if (this.#workspace !== undefined && this.#workspace.bytes >= bytes) return this.#workspace.ptr;
    this.#freeWorkspace();
    this.#workspace = { ptr: cuda.alloc(this.index, bytes), bytes };
    return this.#workspace.ptr;
  }

  /** Frees the workspace once the work queued on the stream, which may still read it, is done. */
  #freeWorkspace(): void {
    if (this.#workspace === undefined) return;
    this.stream.synchronize();
    cuda.free(this.#workspace.ptr);
    this.#workspace = undefined;
  }

  close(): void {
    if (this.module.closed) return;
    this.#freeWorkspace();
    if (this.#ownsStream) this.stream.close();
    this.module.close();
  }

  #shape(items: number): { grid: number; block: number; stream: CudaStream } {
    return { grid: Math.max(1, Math.min(MAX_BLOCKS, Math.ceil(items / THREADS))), block: THREADS, stream: this.stream };
  }
}
