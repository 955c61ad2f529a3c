// What a handler's returned object counts for while its call waits for room
// (core/rpc/server/result-weight.ts).
import { describe, expect, it } from 'vitest';
import { Runtime, Tensor } from '../../core/index.ts';
import { resultWeight } from '../../core/rpc/server/result-weight.ts';

describe('resultWeight', () => {
  it('counts strings by length, binary data by bytes, and a slot for everything else', () => {
    expect(resultWeight({ pad: 'p'.repeat(4_000_000) })).toBeGreaterThanOrEqual(4_000_000);
    expect(resultWeight({ pad: 'p'.repeat(4_000_000) })).toBeLessThan(4_000_100);
    expect(resultWeight({ b: new Uint8Array(1 << 20) })).toBeGreaterThanOrEqual(1 << 20);
    expect(resultWeight({ b: new ArrayBuffer(1 << 20) })).toBeGreaterThanOrEqual(1 << 20);
    expect(resultWeight({ n: 1 })).toBeLessThan(64);
    expect(resultWeight(undefined)).toBeGreaterThan(0);
  });

  it('adds up nested arrays, maps and objects, and counts a value met twice once', () => {
    const chunk = new Uint8Array(1000);
    const weight = resultWeight({ list: [chunk, chunk, { deeper: [new Uint8Array(500)] }], m: new Map([['k', 'v'.repeat(300)]]) });
    expect(weight).toBeGreaterThanOrEqual(1800);
    expect(weight).toBeLessThan(2100);
  });

  it('counts host tensors outside any pool by their bytes, pooled ones a slot', async () => {
    expect(resultWeight({ y: Tensor.zeros([1 << 20], 'u8') })).toBeGreaterThanOrEqual(1 << 20);
    const runtime = Runtime.create();
    try {
      const pool = runtime.createPool({ device: 'cpu', bytes: 4 << 20 });
      const pooled = pool.allocate([1 << 20], 'u8');
      expect(resultWeight({ y: pooled })).toBeLessThan(1024);
      pooled.release();
      pool.close();
    } finally {
      await runtime.close();
    }
  });

  it('stops after a bounded number of nodes, counting a slot for each it left', () => {
    // 300,000 elements, past the 100,000 nodes it visits: the rest still count a slot each.
    const wide = Array.from({ length: 300_000 }, () => 0);
    expect(resultWeight({ wide })).toBeGreaterThanOrEqual(300_000 * 16);
    expect(resultWeight({ wide })).toBeLessThan(300_010 * 16);
  });

  it('weighs an object whose keys are array indices by the elements V8 may give it', () => {
    // {"1023": 0} is an 8 KB object (a helper session's measurement, 2026-12-07).
    expect(resultWeight({ o: { 1023: 0 } })).toBeGreaterThanOrEqual(8 * 1024);
    expect(resultWeight({ o: { 50000: 0 } })).toBeLessThan(256);
  });

  it('past the nodes it visits, weighs what is left by its members\' strings and bytes', () => {
    // The heavy part behind more light nodes than it visits (before: 1.5 MiB for 11.9 MiB held).
    const weight = resultWeight({ a: Array.from({ length: 50_000 }, () => 'x'.repeat(200)), b: Array.from({ length: 1_100_000 }, () => 0) });
    expect(weight).toBeGreaterThanOrEqual(50_000 * 200);
  });

  it('survives a cycle', () => {
    const a: Record<string, unknown> = { s: 'x'.repeat(100) };
    a.self = a;
    expect(resultWeight(a)).toBeGreaterThanOrEqual(100);
  });
});
