// The bytes behind a tensor: a host view or a device pointer, the mapped span they sit in (if
// any) and how to give them back. Pooled and unpooled tensors differ only in what `free` does.
import { Code, GdrpcError } from '../errors.ts';
import { cuda } from '../cuda.ts';
import { addressOf, type MemorySpan } from '../ucx/index.ts';
import { parseDevice, requireCudaDevice, type Device } from './device.ts';

/** What a storage is made of; exactly one of `host` (cpu) and `address` (cuda) describes the bytes. */
export interface StorageInit<Pool extends object = object> {
  device: Device;
  byteLength: number;
  /** The bytes of a cpu storage. */
  host?: Uint8Array;
  /** Device pointer of a cuda storage, or the already known address of `host`. */
  address?: bigint;
  /** The mapped span holding the bytes, made on demand. */
  span?: () => MemorySpan | undefined;
  /** Gives the bytes back (pool free, cuMemFree); called once. */
  free?: () => void;
  /** The pool the bytes were carved from; storage.ts only keeps it for its tensor to name. */
  pool?: Pool;
}

/** The memory of one tensor; released once, after which every access fails. `Pool` is what the
 *  bytes were carved from (tensor.ts names it; this file sits below the pool and cannot). */
export class Storage<Pool extends object = object> {
  readonly device: Device;
  readonly byteLength: number;
  readonly pool: Pool | undefined;
  readonly #host: Uint8Array | undefined;
  #address: bigint | undefined;
  readonly #span: (() => MemorySpan | undefined) | undefined;
  #free: (() => void) | undefined;
  #released = false;
  /** Transfers reading or writing the memory now (hold()): a release waits for them to end. */
  #holds = 0;

  constructor(init: StorageInit<Pool>) {
    this.device = init.device;
    this.byteLength = init.byteLength;
    this.pool = init.pool;
    this.#host = init.host;
    this.#address = init.address;
    this.#span = init.span;
    this.#free = init.free;
  }

  get released(): boolean { return this.#released; }

  /** First byte: a device pointer, or the host view's address (looked up once, lazily). */
  get address(): bigint {
    this.assertLive();
    let address = this.#address;
    if (address === undefined) {
      const host = this.#host!;
      address = host.byteLength === 0 ? 0n : addressOf(host);
      this.#address = address;
    }
    return address;
  }

  /** The host bytes; FAILED_PRECONDITION for device memory. */
  hostBytes(): Uint8Array {
    this.assertLive();
    if (this.#host === undefined) {
      throw new GdrpcError(Code.FAILED_PRECONDITION, `tensor lives on ${this.device}: copy it to 'cpu' with to('cpu') first`);
    }
    return this.#host;
  }

  /** Host view, or undefined for device memory (no liveness check: copy code has checked already). */
  get host(): Uint8Array | undefined { return this.#host; }

  span(): MemorySpan | undefined {
    this.assertLive();
    return this.#span?.();
  }

  /** Gives the memory back once; later calls do nothing. Released, the tensor is unusable at
   *  once, but its memory goes back to its pool only when the transfers holding it have ended. */
  release(): void {
    if (this.#released) return;
    this.#released = true;
    if (this.#holds === 0) this.#freeNow();
  }

  /** Keeps the memory from going back while a transfer (a UCX send or receive) reads or writes it;
   *  returns what ends the hold (once). Before this, a peer that took a pulled tensor's bytes after
   *  the owner released it read what its pool handed out next, and a hostile owner wrote into a
   *  pull's destination after the pull had failed and its caller had let it go (a helper
   *  session's attack, 2026-12-07). */
  hold(): () => void {
    this.assertLive();
    this.#holds += 1;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.#holds -= 1;
      if (this.#holds === 0 && this.#released) this.#freeNow();
    };
  }

  #freeNow(): void {
    const free = this.#free;
    this.#free = undefined;
    free?.();
  }

  assertLive(): void {
    if (this.#released) throw new GdrpcError(Code.FAILED_PRECONDITION, 'tensor was released');
  }
}

/** Unpooled memory for `byteLength` bytes on `device`: a fresh (zeroed) ArrayBuffer, or cuMemAlloc. */
export function allocateStorage(device: Device, byteLength: number): Storage<never> {
  const where = parseDevice(device);
  if (where.kind === 'cpu') return new Storage({ device, byteLength, host: new Uint8Array(hostBuffer(byteLength)) });
  requireCudaDevice(where.index);
  if (byteLength === 0) return new Storage({ device, byteLength, address: 0n });
  const pointer = cudaAlloc(where.index, byteLength);
  return new Storage({ device, byteLength, address: pointer, free: () => cuda.free(pointer) });
}

/** A new ArrayBuffer, with V8's allocation failure turned into RESOURCE_EXHAUSTED. */
export function hostBuffer(byteLength: number): ArrayBuffer {
  try {
    return new ArrayBuffer(byteLength);
  } catch (cause) {
    throw new GdrpcError(Code.RESOURCE_EXHAUSTED, `cannot allocate ${byteLength} bytes of host memory`, { cause });
  }
}

/** The unit in which cuMemAlloc took device memory on the H200 (docs/gpu.md "Allocation sizes"). */
export const CUDA_LARGE_PAGE = 2 << 20;

/** Bytes cuMemAlloc is asked for to hold `byteLength`: from one CUDA_LARGE_PAGE up, a whole number
 *  of them. Measured on an H200 (docs/gpu.md "Allocation sizes"): a 1 GiB cuda_ipc transfer between two
 *  processes took 642-653 µs of device copy from allocations of 1 GiB + 255 B or + 1 MiB + 255 B,
 *  against 509-510 µs from 1 GiB, 1 GiB + 1 MiB or + 2 MiB; and the driver takes 1,026 MiB for any
 *  of those sizes above 1 GiB, so the rounding costs no device memory. */
export function cudaAllocationBytes(byteLength: number): number {
  return byteLength < CUDA_LARGE_PAGE ? byteLength : Math.ceil(byteLength / CUDA_LARGE_PAGE) * CUDA_LARGE_PAGE;
}

/** cuMemAlloc of at least `byteLength` bytes (cudaAllocationBytes), with a failure reported as
 *  RESOURCE_EXHAUSTED naming the device and size. */
export function cudaAlloc(index: number, byteLength: number): bigint {
  try {
    return cuda.alloc(index, cudaAllocationBytes(byteLength));
  } catch (cause) {
    // The shim's own code wins (it knows an out-of-memory from a bad argument); bare errors are most likely OOM.
    const code = cause instanceof GdrpcError ? cause.code : Code.RESOURCE_EXHAUSTED;
    const detail = cause instanceof GdrpcError ? cause.rawMessage : String((cause as Error)?.message ?? cause);
    throw new GdrpcError(code, `cannot allocate ${byteLength} bytes on cuda:${index}: ${detail}`, { cause });
  }
}
