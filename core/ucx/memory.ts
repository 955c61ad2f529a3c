// Mapped memory (ucp_mem_map) and the spans that RMA and zero-copy tag operations take.
import { Code, GdrpcError } from '../errors.ts';
import { native } from '../native.ts';
import { checkObject, checkSize, checkU64, describe, invalid } from './check.ts';
import { Context, toMemoryType, type MemoryType } from './context.ts';
import type { NativeMemoryRegion, NativeTarget } from './native-types.ts';

/** A byte range of a mapped region: what RMA and zero-copy tag operations take. */
export interface MemorySpan { region: MemoryRegion; offset: number; length: number }
/** Tag operations also take plain host memory (Buffer / typed array / DataView). */
export type TagBuffer = ArrayBufferView | MemorySpan;

/** A memory region mapped with ucp_mem_map; its memory type is what UCX detected. */
export class MemoryRegion {
  readonly context: Context;
  readonly address: bigint;
  readonly length: number;
  /** From ucp_mem_query after mapping (what UCX detected, not what was asked). */
  readonly memoryType: MemoryType;
  /** The mapped ArrayBuffer (kept alive by the region), for host regions mapped from one. */
  readonly buffer: ArrayBuffer | undefined;
  readonly #native: NativeMemoryRegion;
  #closed = false;

  private constructor(context: Context, handle: NativeMemoryRegion, buffer: ArrayBuffer | undefined) {
    this.context = context;
    this.#native = handle;
    this.address = handle.address;
    this.length = handle.length;
    this.memoryType = toMemoryType(handle.memoryType);
    this.buffer = buffer;
  }

  /** Maps host memory owned by JS (the region keeps the ArrayBuffer alive), or an address range. */
  static map(context: Context, target: ArrayBuffer | { address: bigint; length: number; memoryType: 'host' | 'cuda' }): MemoryRegion {
    const nativeContext = Context.nativeOf(context);
    const binding = native();
    if (target instanceof ArrayBuffer) {
      if (target.byteLength === 0) throw invalid('cannot map an empty ArrayBuffer');
      return new MemoryRegion(context, new binding.MemoryRegion(nativeContext, target), target);
    }
    const spec = checkObject(target, 'target');
    if (spec instanceof SharedArrayBuffer || ArrayBuffer.isView(spec)) {
      throw invalid(`target must be an ArrayBuffer or {address, length, memoryType}, got ${describe(spec)}`);
    }
    const address = checkU64(spec.address, 'target.address');
    const length = checkSize(spec.length, 'target.length');
    if (address === 0n) throw invalid('target.address must not be 0');
    if (length === 0) throw invalid('target.length must be > 0');
    if (spec.memoryType !== 'host' && spec.memoryType !== 'cuda') {
      throw invalid(`target.memoryType must be 'host' or 'cuda', got ${describe(spec.memoryType)}`);
    }
    if (spec.memoryType === 'cuda' && !binding.cuda.available()) {
      throw new GdrpcError(Code.FAILED_PRECONDITION, `cannot map CUDA memory: ${binding.cuda.unavailableReason() ?? 'no CUDA'}`);
    }
    return new MemoryRegion(context, new binding.MemoryRegion(nativeContext, address, length, spec.memoryType), undefined);
  }

  /** ucp_rkey_pack output, for a peer to unpack. */
  packRkey(): Uint8Array {
    this.#checkOpen();
    return this.#native.packRkey();
  }

  /** A span of this region; INVALID_ARGUMENT when it does not fit. */
  span(offset = 0, length?: number): MemorySpan {
    this.#checkOpen();
    checkSize(offset, 'offset');
    if (offset > this.length) throw invalid(`offset ${offset} is outside the region (${this.length} bytes)`);
    const size = length === undefined ? this.length - offset : checkSize(length, 'length');
    if (offset + size > this.length) {
      throw invalid(`span [${offset}, ${offset + size}) is outside the region (${this.length} bytes)`);
    }
    return { region: this, offset, length: size };
  }

  /** Unmaps the region; FAILED_PRECONDITION while operations use it. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#native.close();
    this.#closed = true;
  }

  get closed(): boolean {
    return this.#closed;
  }

  #checkOpen(): void {
    if (this.#closed) throw new GdrpcError(Code.FAILED_PRECONDITION, 'the memory region is closed');
  }

  /** @internal The native region behind a checked span. */
  static nativeOf(region: MemoryRegion): NativeMemoryRegion {
    region.#checkOpen();
    return region.#native;
  }
}

/** True for objects shaped like a MemorySpan. */
export function isMemorySpan(value: unknown): value is MemorySpan {
  return typeof value === 'object' && value !== null && (value as MemorySpan).region instanceof MemoryRegion;
}

/** Checks a span against its region and returns what the addon takes. */
export function spanTarget(value: unknown, name: string): { target: NativeMemoryRegion; offset: number; length: number } {
  if (!isMemorySpan(value)) throw invalid(`${name} must be a MemorySpan {region, offset, length}, got ${describe(value)}`);
  const offset = checkSize(value.offset, `${name}.offset`);
  const length = checkSize(value.length, `${name}.length`);
  if (offset + length > value.region.length) {
    throw invalid(`${name} [${offset}, ${offset + length}) is outside its region (${value.region.length} bytes)`);
  }
  return { target: MemoryRegion.nativeOf(value.region), offset, length };
}

/** A tag buffer (host view or span) as the addon takes it. */
export function tagTarget(value: unknown, name: string): { target: NativeTarget; offset: number; length: number } {
  if (ArrayBuffer.isView(value)) return { target: value, offset: 0, length: value.byteLength };
  if (isMemorySpan(value)) return spanTarget(value, name);
  throw invalid(`${name} must be an ArrayBufferView or a MemorySpan, got ${describe(value)}`);
}
