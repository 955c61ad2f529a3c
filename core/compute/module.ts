// PTX modules and kernel launches (cuModuleLoadDataEx, cuLaunchKernel). A kernel is declared with
// its parameter types once; launch() checks each argument against them, packs them the way the
// driver lays out a parameter buffer, and queues the kernel on a stream.
import { Tensor } from '../tensor/index.ts';
import { checkDevice, driver } from '../cuda-driver.ts';
import { describe, invalid } from '../ucx/check.ts';
import { checkStream, type CudaStream } from './stream.ts';

/** A kernel parameter's C type: a device pointer, or a scalar of that width. */
export type KernelParam = 'ptr' | 'i32' | 'u32' | 'f32' | 'i64' | 'u64' | 'f64';
/** A launch dimension: x, or [x, y, z] (missing ones are 1). */
export type Dim3 = number | [number, number?, number?];
/** A pointer argument: a CUDA tensor on the kernel's device, a raw device pointer, or null (0). */
export type KernelArg = Tensor | bigint | number | null;

/** How a kernel runs: the grid of blocks, threads per block, dynamic shared memory, the stream
 *  (default: the device's legacy default stream). */
export interface LaunchShape { grid: Dim3; block: Dim3; sharedBytes?: number; stream?: CudaStream }

const WIDTH: Record<KernelParam, 4 | 8> = { ptr: 8, i32: 4, u32: 4, f32: 4, i64: 8, u64: 8, f64: 8 };
const GRID_LIMITS = [2 ** 31 - 1, 65535, 65535];
const BLOCK_LIMITS = [1024, 1024, 64];

/** A module loaded from PTX into the primary context of `device`. */
export class CudaModule {
  #handle: bigint | undefined;

  private constructor(readonly device: number, handle: bigint) {
    this.#handle = handle;
  }

  /** Loads PTX text (JIT-compiled by the driver for this GPU); a compile error carries the JIT log. */
  static load(device: number, ptx: string | Uint8Array): CudaModule {
    const index = checkDevice(device);
    let text: Uint8Array;
    if (typeof ptx === 'string') text = new TextEncoder().encode(`${ptx}\0`);
    else if (ptx instanceof Uint8Array) text = ptx.at(-1) === 0 ? ptx : Uint8Array.from([...ptx, 0]);
    else throw invalid(`ptx must be a string or a Uint8Array, got ${describe(ptx)}`);
    if (text.length <= 1) throw invalid('ptx is empty');
    return new CudaModule(index, driver().moduleLoad(index, text));
  }

  get closed(): boolean { return this.#handle === undefined; }

  /** The kernel `name` (its extern "C" name) with parameters of `params` types, in order. */
  kernel(name: string, params: readonly KernelParam[]): CudaKernel {
    if (this.#handle === undefined) throw invalid('CudaModule is closed');
    if (typeof name !== 'string' || name.length === 0) throw invalid(`kernel name must be a non-empty string, got ${describe(name)}`);
    if (!Array.isArray(params) || params.some((p) => !(p in WIDTH))) {
      throw invalid(`kernel ${name}: params must be an array of ${Object.keys(WIDTH).join(', ')}, got ${describe(params)}`);
    }
    const { handle, maxThreadsPerBlock } = driver().moduleFunction(this.device, this.#handle, name);
    return new CudaKernel(this, name, [...params], handle, maxThreadsPerBlock);
  }

  /** Unloads the module (idempotent); its kernels can no longer be launched. Work already
   *  queued finishes first (the driver waits for it). */
  close(): void {
    const handle = this.#handle;
    if (handle === undefined) return;
    this.#handle = undefined;
    driver().moduleUnload(this.device, handle);
  }
}

/** One kernel of a module. */
export class CudaKernel {
  /** @internal */
  constructor(readonly module: CudaModule, readonly name: string, readonly params: readonly KernelParam[], readonly handle: bigint, readonly maxThreadsPerBlock: number) {}

  /** Queues the kernel on `shape.stream` with `args` (one per declared parameter). Returns at once. */
  launch(shape: LaunchShape, ...args: KernelArg[]): void {
    if (this.module.closed) throw invalid(`kernel ${this.name}: its module is closed`);
    const what = `kernel ${this.name}`;
    if (typeof shape !== 'object' || shape === null) throw invalid(`${what}: launch shape must be an object, got ${describe(shape)}`);
    const grid = dims(shape.grid, GRID_LIMITS, `${what}: grid`);
    const block = dims(shape.block, BLOCK_LIMITS, `${what}: block`);
    const threads = block[0]! * block[1]! * block[2]!;
    if (threads > this.maxThreadsPerBlock) throw invalid(`${what}: ${threads} threads per block, at most ${this.maxThreadsPerBlock}`);
    const sharedBytes = shape.sharedBytes ?? 0;
    if (!Number.isInteger(sharedBytes) || sharedBytes < 0 || sharedBytes > 0xffffffff) throw invalid(`${what}: sharedBytes must be an integer >= 0, got ${describe(sharedBytes)}`);
    let stream = 0n;
    if (shape.stream !== undefined) {
      const s = checkStream(shape.stream, `${what}: stream`);
      if (s.device !== this.module.device) throw invalid(`${what}: a stream of cuda:${s.device} for a kernel on cuda:${this.module.device}`);
      stream = s.handle;
    }
    if (args.length !== this.params.length) throw invalid(`${what} takes ${this.params.length} arguments, got ${args.length}`);
    const { bytes, offsets } = this.#pack(args);
    driver().launch(this.module.device, this.handle, grid, block, sharedBytes, stream, bytes, offsets);
  }

  /** The arguments packed at their natural alignment, and where each one starts. */
  #pack(args: KernelArg[]): { bytes: Uint8Array; offsets: Uint32Array } {
    const offsets = new Uint32Array(this.params.length);
    let size = 0;
    this.params.forEach((p, i) => {
      offsets[i] = align(size, WIDTH[p]);
      size = offsets[i]! + WIDTH[p];
    });
    const bytes = new Uint8Array(Math.max(size, 1));
    const view = new DataView(bytes.buffer);
    this.params.forEach((param, i) => {
      write(view, offsets[i]!, param, args[i]!, `kernel ${this.name} argument ${i} (${param})`, this.module.device);
    });
    return { bytes, offsets };
  }
}

function align(n: number, to: number): number { return Math.ceil(n / to) * to; }

function dims(value: Dim3, limits: number[], what: string): number[] {
  const list = typeof value === 'number' ? [value] : value;
  if (!Array.isArray(list) || list.length === 0 || list.length > 3) throw invalid(`${what} must be a number or [x, y?, z?], got ${describe(value)}`);
  return [0, 1, 2].map((i) => {
    const d = list[i] ?? 1;
    if (!Number.isInteger(d) || d < 1 || d > limits[i]!) throw invalid(`${what}[${i}] must be an integer in [1, ${limits[i]}], got ${describe(d)}`);
    return d;
  });
}

const INT_RANGE: Partial<Record<KernelParam, [number, number]>> = { i32: [-(2 ** 31), 2 ** 31 - 1], u32: [0, 2 ** 32 - 1] };

function write(view: DataView, offset: number, param: KernelParam, arg: KernelArg, what: string, device: number): void {
  switch (param) {
    case 'ptr':
      return view.setBigUint64(offset, pointerOf(arg, what, device), true);
    case 'i32': case 'u32': {
      const [min, max] = INT_RANGE[param]!;
      if (typeof arg !== 'number' || !Number.isInteger(arg) || arg < min || arg > max) throw invalid(`${what} must be an integer in [${min}, ${max}], got ${describe(arg)}`);
      return param === 'i32' ? view.setInt32(offset, arg, true) : view.setUint32(offset, arg, true);
    }
    case 'f32': case 'f64':
      if (typeof arg !== 'number') throw invalid(`${what} must be a number, got ${describe(arg)}`);
      return param === 'f32' ? view.setFloat32(offset, arg, true) : view.setFloat64(offset, arg, true);
    case 'i64': case 'u64': {
      const value = typeof arg === 'number' && Number.isSafeInteger(arg) ? BigInt(arg) : arg;
      if (typeof value !== 'bigint') throw invalid(`${what} must be a bigint or a safe integer, got ${describe(arg)}`);
      if (param === 'u64' ? value !== BigInt.asUintN(64, value) : value !== BigInt.asIntN(64, value)) throw invalid(`${what} is out of range: ${value}`);
      return param === 'i64' ? view.setBigInt64(offset, value, true) : view.setBigUint64(offset, value, true);
    }
  }
}

function pointerOf(arg: KernelArg, what: string, device: number): bigint {
  if (arg === null || arg === 0 || arg === 0n) return 0n;
  if (arg instanceof Tensor) {
    if (arg.released) throw invalid(`${what}: the tensor has been released`);
    if (arg.device !== `cuda:${device}`) throw invalid(`${what}: a tensor on ${arg.device} for a kernel on cuda:${device}`);
    return arg.address;
  }
  if (typeof arg !== 'bigint' || arg !== BigInt.asUintN(64, arg)) throw invalid(`${what} must be a CUDA tensor, a device pointer (bigint) or null, got ${describe(arg)}`);
  return arg;
}
