// What every backend of gdrpc's kernels offers (kernels.ts: GPU, host.ts: host), and the argument
// checks they share, so that a mistake gets the same error with and without a GPU.
import type { Device, Tensor } from '../tensor/index.ts';
import { describe, invalid } from '../ucx/check.ts';
import type { CudaStream } from './stream.ts';

/** The epilogue of gemm: out = relu?(a x b + bias) + residual, each part optional. */
export interface GemmOptions { bias?: Tensor; relu?: boolean; residual?: Tensor }

/** The kernels the examples and tests compute with, on one device. */
export interface Kernels {
  readonly device: Device;
  /** The stream work is queued on (GPU only). */
  readonly stream: CudaStream | undefined;
  /** Fills an f16 or bf16 tensor with a pattern of `seed`: values in [-scale/2, scale/2) (scale default 1). */
  fill(out: Tensor, options: { seed: number; scale?: number }): void;
  /** out = a + b, elementwise, f16 (out may be a or b). */
  add(out: Tensor, a: Tensor, b: Tensor): void;
  /** out[M, N] = epilogue(a[M, K] x b[K, N]), f16 with f32 accumulation. */
  gemm(out: Tensor, a: Tensor, b: Tensor, options?: GemmOptions): void;
  /** An order-free 64-bit checksum of the tensor's bytes (any dtype), after the work queued so far. */
  checksum(tensor: Tensor): Promise<bigint>;
  /** Resolves when the work queued so far is done. */
  finished(): Promise<void>;
  /** Frees what load() took (idempotent). */
  close(): void;
}

/** Throws unless `t` is a live tensor on `device`. */
export function checkOn(t: unknown, what: string, device: Device): Tensor {
  const tensor = t as Tensor;
  if (typeof t !== 'object' || t === null || typeof tensor.device !== 'string' || typeof tensor.numel !== 'number') throw invalid(`${what} must be a Tensor, got ${describe(t)}`);
  if (tensor.released) throw invalid(`${what} has been released`);
  if (tensor.device !== device) throw invalid(`${what} is on ${tensor.device}; these kernels run on ${device}`);
  return tensor;
}

function checkF16(t: unknown, what: string, device: Device): Tensor {
  const tensor = checkOn(t, what, device);
  if (tensor.dtype !== 'f16') throw invalid(`${what} must be f16, got ${tensor.dtype}`);
  return tensor;
}

/** Fill's arguments, checked: the seed as u32, the scale as a finite number. */
export function checkFill(out: Tensor, options: { seed: number; scale?: number }, device: Device): { seed: number; scale: number } {
  const tensor = checkOn(out, 'fill out', device);
  if (tensor.dtype !== 'f16' && tensor.dtype !== 'bf16') throw invalid(`fill out must be f16 or bf16, got ${tensor.dtype}`);
  const seed = options?.seed;
  if (typeof seed !== 'number' || !Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw invalid(`fill seed must be an integer in [0, 2^32), got ${describe(seed)}`);
  const scale = options.scale ?? 1;
  if (typeof scale !== 'number' || !Number.isFinite(scale)) throw invalid(`fill scale must be a finite number, got ${describe(scale)}`);
  return { seed, scale };
}

/** Throws unless out, a and b are f16 tensors of one size on `device`. */
export function checkAdd(out: Tensor, a: Tensor, b: Tensor, device: Device): void {
  for (const [t, what] of [[out, 'add out'], [a, 'add a'], [b, 'add b']] as const) checkF16(t, what, device);
  if (a.numel !== out.numel || b.numel !== out.numel) throw invalid(`add: out, a and b must have as many elements (${out.numel}, ${a.numel}, ${b.numel})`);
}

/** The gemm's M, N, K from checked shapes: a [M, K], b [K, N], out [M, N], bias [N], residual [M, N]. */
export function checkGemm(out: Tensor, a: Tensor, b: Tensor, options: GemmOptions, device: Device): { m: number; n: number; k: number } {
  for (const [t, what] of [[out, 'gemm out'], [a, 'gemm a'], [b, 'gemm b']] as const) checkF16(t, what, device);
  if (a.shape.length !== 2 || b.shape.length !== 2 || out.shape.length !== 2) throw invalid(`gemm needs 2-d tensors, got a [${a.shape}], b [${b.shape}], out [${out.shape}]`);
  const [m, k] = a.shape as [number, number];
  const [k2, n] = b.shape as [number, number];
  if (k !== k2 || out.shape[0] !== m || out.shape[1] !== n) throw invalid(`gemm shapes do not agree: a [${a.shape}] x b [${b.shape}] -> out [${out.shape}]`);
  if (m > 2 ** 31 - 1 || n > 2 ** 31 - 1 || k > 2 ** 31 - 1) throw invalid('gemm dimensions must be below 2^31');
  if (typeof options !== 'object' || options === null) throw invalid(`gemm options must be an object, got ${describe(options)}`);
  if (options.relu !== undefined && typeof options.relu !== 'boolean') throw invalid(`gemm options.relu must be a boolean, got ${describe(options.relu)}`);
  if (options.bias !== undefined) {
    const bias = checkF16(options.bias, 'gemm bias', device);
    if (bias.numel !== n) throw invalid(`gemm bias must have N = ${n} elements, got [${bias.shape}]`);
  }
  if (options.residual !== undefined) {
    const residual = checkF16(options.residual, 'gemm residual', device);
    if (residual.shape.length !== 2 || residual.shape[0] !== m || residual.shape[1] !== n) throw invalid(`gemm residual must be [${m}, ${n}], got [${residual.shape}]`);
  }
  return { m, n, k };
}
