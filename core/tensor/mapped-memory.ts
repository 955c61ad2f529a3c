// One allocation mapped with UCX (ucp_mem_map) as a whole: a pool's arena, or a one-off overflow
// registration. Host memory must map; CUDA memory that UCX cannot map as CUDA (a UCX without
// CUDA support) is kept unmapped with the reason, so that the RPC layer stages it through host.
import { GdrpcError } from '../errors.ts';
import { cuda } from '../cuda.ts';
import { addressOf, MemoryRegion, type Context } from '../ucx/index.ts';
import { ARENA_ALIGNMENT } from './arena.ts';
import { requireCudaDevice, type DeviceKind } from './device.ts';
import { cudaAlloc, hostBuffer } from './storage.ts';

/** `length` usable bytes starting on an ARENA_ALIGNMENT boundary, and the region mapping them. */
export interface MappedMemory {
  /** Address of the first usable byte (aligned). */
  readonly address: bigint;
  readonly length: number;
  /** The usable bytes, for host memory. */
  readonly host: Uint8Array | undefined;
  /** The UCX region covering the whole allocation; undefined when unmapped (see stagingReason). */
  readonly region: MemoryRegion | undefined;
  /** Offset of the first usable byte inside the region. */
  readonly regionOffset: number;
  /** Why UCX could not map this memory as its own memory type; undefined when it did. */
  readonly stagingReason: string | undefined;
  /** Unmaps, then frees device memory (host memory goes with the last reference). */
  close(): void;
}

/** Allocates `length` bytes on `where` (page-locked host memory when `pinned`) and maps them with UCX. */
export function mapMemory(context: Context, where: DeviceKind, length: number, pinned = false): MappedMemory {
  return where.kind === 'cpu' ? mapHost(context, length, pinned) : mapCuda(context, where.index, length);
}

// Padding by ALIGNMENT - 1 lets the usable range start on a boundary whatever the allocator returned.
function alignmentOffset(address: bigint): number {
  const rest = Number(address % BigInt(ARENA_ALIGNMENT));
  return rest === 0 ? 0 : ARENA_ALIGNMENT - rest;
}

function mapHost(context: Context, length: number, pinned: boolean): MappedMemory {
  // Pinned memory lets cuMemcpy and UCX's cuda_copy stage host<->GPU at full speed without bounce buffers.
  const buffer = pinned ? cuda.allocHost(length + ARENA_ALIGNMENT - 1) : hostBuffer(length + ARENA_ALIGNMENT - 1);
  const start = addressOf(buffer);
  const offset = alignmentOffset(start);
  const region = MemoryRegion.map(context, buffer);
  return {
    address: start + BigInt(offset),
    length,
    host: new Uint8Array(buffer, offset, length),
    region,
    regionOffset: offset,
    stagingReason: undefined,
    close: () => region.close(),
  };
}

function mapCuda(context: Context, index: number, length: number): MappedMemory {
  requireCudaDevice(index);
  const padded = length + ARENA_ALIGNMENT - 1;
  const pointer = cudaAlloc(index, padded);
  const offset = alignmentOffset(pointer);
  let region: MemoryRegion | undefined;
  let stagingReason: string | undefined;
  try {
    ({ region, stagingReason } = mapCudaRegion(context, index, pointer, padded));
  } catch (error) {
    cuda.free(pointer);
    throw error;
  }
  return {
    address: pointer + BigInt(offset),
    length,
    host: undefined,
    region,
    regionOffset: offset,
    stagingReason,
    close: () => {
      region?.close();
      cuda.free(pointer);
    },
  };
}

/** Maps device memory and checks what UCX detected (ucp_mem_query), not what was asked. */
function mapCudaRegion(context: Context, index: number, address: bigint, length: number):
  { region: MemoryRegion | undefined; stagingReason: string | undefined } {
  const types = context.memoryTypes();
  if (!types.includes('cuda')) {
    return { region: undefined, stagingReason: `this UCX cannot register CUDA memory (it supports ${types.join(', ') || 'no memory types'})` };
  }
  let region: MemoryRegion;
  try {
    region = MemoryRegion.map(context, { address, length, memoryType: 'cuda' });
  } catch (cause) {
    const detail = cause instanceof GdrpcError ? cause.rawMessage : String((cause as Error)?.message ?? cause);
    return { region: undefined, stagingReason: `UCX could not map cuda:${index} memory: ${detail}` };
  }
  if (region.memoryType === 'cuda') return { region, stagingReason: undefined };
  const detected = region.memoryType;
  region.close();
  return { region: undefined, stagingReason: `UCX mapped cuda:${index} memory as '${detected}', not 'cuda'` };
}

