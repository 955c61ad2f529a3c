import { describe, expect, it } from 'vitest';
import { alignUp, Arena, ARENA_ALIGNMENT } from '../../core/tensor/arena.ts';
import { expectCode } from './expect-error.ts';

describe('Arena', () => {
  it('rounds capacity and blocks up to 256 bytes', () => {
    const arena = new Arena(1000);
    expect(ARENA_ALIGNMENT).toBe(256);
    expect(arena.capacity).toBe(1024);
    expect(arena.allocate(1)).toBe(0);
    expect(arena.allocate(257)).toBe(256);
    expect(arena.used).toBe(768);
    expect(arena.allocate(256)).toBe(768);
    expect(arena.allocate(1)).toBeUndefined();
  });

  it('is first fit and merges a freed block with both neighbours', () => {
    const arena = new Arena(4 * 256);
    const [a, b, c, d] = [0, 1, 2, 3].map(() => arena.allocate(256)!);
    expect([a, b, c, d]).toEqual([0, 256, 512, 768]);
    arena.free(b!);
    arena.free(d!);
    expect(arena.freeBlocks).toBe(2);
    expect(arena.allocate(512)).toBeUndefined();  // 512 free in total, but not in one piece
    arena.free(c!);                                // joins b (before) and d (after)
    expect(arena.freeBlocks).toBe(1);
    expect(arena.largestFree).toBe(768);
    expect(arena.allocate(768)).toBe(256);
  });

  it('catches a double or stray free instead of corrupting the free list', () => {
    const arena = new Arena(512);
    const a = arena.allocate(10)!;
    arena.free(a);
    expectCode(() => arena.free(a), 'INTERNAL', /not a live block/);
    expectCode(() => arena.free(128), 'INTERNAL');
    expect(arena.freeBlocks).toBe(1);
  });

  it('rejects non-positive sizes', () => {
    expectCode(() => new Arena(0), 'INVALID_ARGUMENT');
    expectCode(() => new Arena(1.5), 'INVALID_ARGUMENT');
    expectCode(() => new Arena(64).allocate(0), 'INVALID_ARGUMENT');
  });

  it('never overlaps blocks and coalesces back to one range (random workload)', () => {
    let seed = 12345;
    const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    const arena = new Arena(64 * 1024);
    const live = new Map<number, number>();
    for (let step = 0; step < 2000; step++) {
      if (live.size > 0 && random() < 0.45) {
        const offsets = [...live.keys()];
        const offset = offsets[Math.floor(random() * offsets.length)]!;
        arena.free(offset);
        live.delete(offset);
      } else {
        const size = 1 + Math.floor(random() * 4000);
        const offset = arena.allocate(size);
        if (offset === undefined) {
          expect(arena.largestFree).toBeLessThan(alignUp(size));
          continue;
        }
        expect(offset % 256).toBe(0);
        expect(offset + alignUp(size)).toBeLessThanOrEqual(arena.capacity);
        for (const [other, otherSize] of live) {
          expect(offset + alignUp(size) <= other || other + otherSize <= offset).toBe(true);
        }
        live.set(offset, alignUp(size));
      }
      expect(arena.used).toBe([...live.values()].reduce((sum, n) => sum + n, 0));
    }
    for (const offset of live.keys()) arena.free(offset);
    expect(arena.used).toBe(0);
    expect(arena.freeBlocks).toBe(1);
    expect(arena.allocate(64 * 1024)).toBe(0);
  });
});
