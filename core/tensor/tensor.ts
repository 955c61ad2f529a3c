// A dense, contiguous, row-major tensor on the host or on a CUDA device. The bytes sit in a
// Storage: unpooled (a plain ArrayBuffer or cuMemAlloc) or carved from a TensorPool whose whole
// allocation is mapped with UCX, which is what lets movers send it without registering per call.
import { Code, GdrpcError } from '../errors.ts';
import { cuda } from '../cuda.ts';
import type { MemorySpan } from '../ucx/index.ts';
import { copyStorage, sameBytes } from './copy.ts';
import { isDevice, parseDevice, type Device } from './device.ts';
import { checkDType, DTYPES, dtypeOfArray, elementSize, isDType, viewOf, type DType, type TypedArray } from './dtype.ts';
import { checkOptions, rule, type OptionRules } from './options.ts';
import { checkShape, type ShapeInfo } from './shape.ts';
import { allocateStorage, Storage } from './storage.ts';

/** What a pool holds now. `used` counts arena bytes in live blocks (256-byte granules), not overflow. */
export interface TensorPoolStats {
  device: Device;
  capacity: number;
  used: number;
  liveTensors: number;
  overflowRegistrations: number;
  /** allocateWhenFree calls waiting for blocks. */
  waiting: number;
  /** Bytes those waiting calls ask for, together. */
  waitingBytes: number;
  /** allocateWhenFree calls that have had to wait since the pool was made (a server whose pool
   *  is too small for the calls it gets makes them wait here: docs/runtime-api.md "Pools"). */
  waited: number;
}

/** A TensorPool as its tensors and allocation options see it. TensorPool (pool.ts) is the one
 *  implementation; it builds Tensors, so this file names it by what it offers instead of importing
 *  it, and the two files read one after the other. */
export interface TensorPoolLike {
  readonly device: Device;
  readonly allowOverflow: boolean;
  readonly pinned: boolean;
  /** True when UCX could not map the pool's memory as its own type (movers stage it). */
  readonly staged: boolean;
  readonly stagingReason: string | undefined;
  readonly closed: boolean;
  allocate(shape: number[], dtype: DType): Tensor;
  stats(): TensorPoolStats;
}

// Every TensorPool, branded as it is constructed, so that a `pool` option is checked to be a real
// pool (not an object of the same shape) without this file importing pool.ts.
const pools = new WeakSet<object>();

/** Called by each TensorPool as it is constructed. */
export function markPool(pool: TensorPoolLike): void {
  pools.add(pool);
}

/** Whether `value` is a TensorPool. */
export function isTensorPool(value: unknown): value is TensorPoolLike {
  return typeof value === 'object' && value !== null && pools.has(value);
}

/** Where to allocate: a device (default 'cpu') or a pool (whose device it must match). */
export interface AllocateOptions {
  device?: Device;
  pool?: TensorPoolLike;
}

const DEVICE = rule(`'cpu' or 'cuda:N'`, isDevice);
const POOL = rule('a TensorPool', isTensorPool);
const ALLOCATE_OPTIONS: OptionRules<AllocateOptions> = { device: DEVICE, pool: POOL };
const FROM_ARRAY_OPTIONS: OptionRules<{ shape?: number[]; dtype?: DType }> = {
  shape: rule('an array of dimensions', Array.isArray),
  dtype: rule(`one of ${DTYPES.join(', ')}`, isDType),
};

/** A dense row-major tensor: dtype, shape and the storage holding its bytes. */
export class Tensor {
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly numel: number;
  readonly byteLength: number;
  readonly #storage: Storage<TensorPoolLike>;

  /** Internal: use fromArray/empty/zeros or TensorPool.allocate; `info` must come from checkShape. */
  constructor(dtype: DType, info: ShapeInfo, storage: Storage<TensorPoolLike>) {
    this.dtype = dtype;
    this.shape = info.shape;
    this.numel = info.numel;
    this.byteLength = info.byteLength;
    this.#storage = storage;
  }

  /** A host tensor viewing `data` (no copy, unless `data` is misaligned for `dtype`); shape defaults to 1-D. */
  static fromArray(data: TypedArray, options: { shape?: number[]; dtype?: DType } = {}): Tensor {
    checkOptions('Tensor.fromArray options', options, FROM_ARRAY_OPTIONS);
    const natural = dtypeOfArray(data);  // also rejects anything that is not a typed array
    const dtype = options.dtype === undefined ? natural : checkDType(options.dtype);
    const size = elementSize(dtype);
    let info: ShapeInfo;
    if (options.shape !== undefined) {
      info = checkShape(options.shape, dtype);
      if (info.byteLength !== data.byteLength) {
        throw new GdrpcError(Code.INVALID_ARGUMENT, `shape [${info.shape.join(', ')}] of ${dtype} needs ${info.byteLength} bytes, the array has ${data.byteLength}`);
      }
    } else {
      if (data.byteLength % size !== 0) {
        throw new GdrpcError(Code.INVALID_ARGUMENT, `${data.byteLength} bytes is not a whole number of ${dtype} elements (${size} bytes each)`);
      }
      info = checkShape([data.byteLength / size], dtype);
    }
    let bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    // toArray() must be able to view the bytes as `dtype`; reinterpreting a byte buffer at an odd offset needs a copy.
    if (data.byteOffset % size !== 0) bytes = bytes.slice();
    return new Tensor(dtype, info, new Storage({ device: 'cpu', byteLength: info.byteLength, host: bytes }));
  }

  /** An uninitialised tensor (unpooled host memory happens to be zeroed; pools and GPUs are not). */
  static empty(shape: number[], dtype: DType, options: AllocateOptions = {}): Tensor {
    checkOptions('Tensor allocation options', options, ALLOCATE_OPTIONS);
    const info = checkShape(shape, checkDType(dtype));
    if (options.pool !== undefined) {
      if (options.device !== undefined && options.device !== options.pool.device) {
        throw new GdrpcError(Code.INVALID_ARGUMENT, `device ${options.device} does not match the pool's device ${options.pool.device}`);
      }
      return options.pool.allocate(shape, dtype);
    }
    return new Tensor(dtype, info, allocateStorage(options.device ?? 'cpu', info.byteLength));
  }

  /** A tensor filled with zero bytes. */
  static zeros(shape: number[], dtype: DType, options: AllocateOptions = {}): Tensor {
    const tensor = Tensor.empty(shape, dtype, options);
    const fresh = options.pool === undefined && tensor.device === 'cpu';  // a new ArrayBuffer is already zero
    if (!fresh && tensor.byteLength > 0) {
      if (tensor.device === 'cpu') tensor.bytes().fill(0);
      else cuda.memset(tensor.address, 0, tensor.byteLength);
    }
    return tensor;
  }

  get device(): Device { return this.#storage.device; }
  /** First byte (host or device pointer). */
  get address(): bigint { return this.#storage.address; }
  /** The pool this tensor was carved from (or overflowed from), if any. */
  get pool(): TensorPoolLike | undefined { return this.#storage.pool; }
  /** True once release() ran (or its pool was force-closed). */
  get released(): boolean { return this.#storage.released; }

  /** Keeps this tensor's memory from going back to its pool while a transfer reads or writes it
   *  (a release meanwhile makes the tensor unusable at once, and frees it when the last hold
   *  ends); returns what ends the hold. Used by the transports; FAILED_PRECONDITION once
   *  released. */
  hold(): () => void { return this.#storage.hold(); }

  /** The mapped span holding this tensor, when it lives in a UCX-mapped pool/region. */
  span(): MemorySpan | undefined { return this.#storage.span(); }

  /** A typed-array view of a host tensor (f16/bf16 as Uint16Array, bool as Uint8Array). */
  toArray(): TypedArray {
    const bytes = this.#storage.hostBytes();
    return viewOf(this.dtype, bytes.buffer, bytes.byteOffset, this.numel);
  }

  /** The bytes of a host tensor, as a view. */
  bytes(): Uint8Array { return this.#storage.hostBytes(); }

  /** A copy on `device` (from `options.pool` when given); host<->GPU and GPU<->GPU through cuMemcpy. */
  to(device: Device, options: { pool?: TensorPoolLike } = {}): Tensor {
    this.#storage.assertLive();
    parseDevice(device, 'Tensor.to device');
    checkOptions('Tensor.to options', options, { pool: POOL });
    const copy = Tensor.empty([...this.shape], this.dtype, { device, ...(options.pool ? { pool: options.pool } : {}) });
    try {
      copyStorage(copy.#storage, this.#storage);
    } catch (error) {
      copy.release();
      throw error;
    }
    return copy;
  }

  /** Overwrites this tensor's bytes with those of `src` (same byte length; host or device on either side); synchronous. */
  copyFrom(src: Tensor): void {
    if (src.byteLength !== this.byteLength) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `cannot copy ${src.byteLength} bytes into a tensor of ${this.byteLength}`);
    }
    copyStorage(this.#storage, src.#storage);
  }

  /** Same dtype, shape and bytes (device data is copied to the host in pieces to compare). */
  equals(other: Tensor): boolean {
    if (this.dtype !== other.dtype || this.shape.length !== other.shape.length) return false;
    if (this.shape.some((dim, i) => dim !== other.shape[i])) return false;
    return sameBytes(this.#storage, other.#storage);
  }

  /** Returns the memory to its pool, or frees it; idempotent. */
  release(): void { this.#storage.release(); }
}
