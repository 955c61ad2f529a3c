// Offset allocator for a pool's one mapped allocation: first fit over a free list kept sorted
// by offset, neighbours merged on free so that the arena does not fragment into slivers.
// It only hands out offsets; the pool owns the memory.
import { Code, GdrpcError } from '../errors.ts';

/** Every block starts and ends on this boundary (what cuMemAlloc guarantees, enough for any dtype and for GPU vector loads). */
export const ARENA_ALIGNMENT = 256;

/** Rounds `bytes` up to the arena alignment. */
export function alignUp(bytes: number): number {
  return Math.ceil(bytes / ARENA_ALIGNMENT) * ARENA_ALIGNMENT;
}

interface FreeBlock { offset: number; size: number }

/** First-fit allocator with coalescing over [0, capacity); capacity is rounded up to the alignment. */
export class Arena {
  readonly capacity: number;
  #free: FreeBlock[];
  /** offset -> size of every live block, so that a bad or repeated free is caught, not merged in. */
  #live = new Map<number, number>();
  #used = 0;

  constructor(capacity: number) {
    if (!Number.isSafeInteger(capacity) || capacity <= 0) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `arena capacity must be a positive safe integer, got ${capacity}`);
    }
    this.capacity = alignUp(capacity);
    this.#free = [{ offset: 0, size: this.capacity }];
  }

  /** Reserves at least `bytes` (> 0); returns the offset, or undefined when no free block is large enough. */
  allocate(bytes: number): number | undefined {
    if (!Number.isSafeInteger(bytes) || bytes <= 0) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `arena allocation must be a positive safe integer, got ${bytes}`);
    }
    const size = alignUp(bytes);
    const index = this.#free.findIndex((block) => block.size >= size);
    if (index < 0) return undefined;
    const block = this.#free[index]!;
    const offset = block.offset;
    if (block.size === size) this.#free.splice(index, 1);
    else { block.offset += size; block.size -= size; }
    this.#live.set(offset, size);
    this.#used += size;
    return offset;
  }

  /** Returns the block at `offset` to the free list, merging it with free neighbours. */
  free(offset: number): void {
    const size = this.#live.get(offset);
    if (size === undefined) {
      throw new GdrpcError(Code.INTERNAL, `arena: free of offset ${offset}, which is not a live block`);
    }
    this.#live.delete(offset);
    this.#used -= size;
    const next = this.#firstFreeAfter(offset);
    const prev = next > 0 ? this.#free[next - 1] : undefined;
    const after = this.#free[next];
    const joinsPrev = prev !== undefined && prev.offset + prev.size === offset;
    const joinsNext = after !== undefined && offset + size === after.offset;
    if (joinsPrev && joinsNext) { prev.size += size + after.size; this.#free.splice(next, 1); }
    else if (joinsPrev) prev.size += size;
    else if (joinsNext) { after.offset = offset; after.size += size; }
    else this.#free.splice(next, 0, { offset, size });
  }

  /** Index of the first free block starting after `offset` (binary search; the list is sorted). */
  #firstFreeAfter(offset: number): number {
    let lo = 0;
    let hi = this.#free.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.#free[mid]!.offset < offset) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Bytes in live blocks (aligned sizes). */
  get used(): number { return this.#used; }
  /** Number of live blocks. */
  get liveBlocks(): number { return this.#live.size; }
  /** Number of separate free ranges (1 when everything is free: proof of coalescing). */
  get freeBlocks(): number { return this.#free.length; }
  /** Size of the largest free range: the largest allocation that can succeed now. */
  get largestFree(): number {
    return this.#free.reduce((max, block) => Math.max(max, block.size), 0);
  }
}
