// bench/idle-gap.ts: the cost of a gap, gdrpc beside plain JavaScript and Node's TCP.
import { describe, expect, it } from 'vitest';
import { gapsFrom, runIdleGapBench } from '../../bench/idle-gap.ts';

describe('idle-gap bench', () => {
  it('reads --gaps as whole milliseconds, with a default, and refuses anything else', () => {
    expect(gapsFrom([])).toEqual([0, 1, 5, 20, 100]);
    expect(gapsFrom(['--gaps', '0,3,250'])).toEqual([0, 3, 250]);
    for (const bad of ['', '1.5', '-1', '2,x', '20000']) expect(() => gapsFrom(['--gaps', bad])).toThrow(/--gaps takes/);
    expect(() => gapsFrom(['--gaps'])).toThrow(/--gaps takes/);
  });

  it('times the three systems at every gap and relates each to its own back-to-back time', async () => {
    const result = await runIdleGapBench({ flags: ['--samples', '5', '--gaps', '0,2'] }) as { results: Array<Record<string, unknown>> };
    const rows = result.results;
    expect(rows.map((row) => `${row.system as string}@${row.gap_ms as number}`)).toEqual(['js@0', 'node-tcp@0', 'gdrpc@0', 'js@2', 'node-tcp@2', 'gdrpc@2']);
    for (const row of rows) {
      expect(row.samples).toBe(5);
      expect(row.p50_us as number).toBeGreaterThan(0);
      expect(row.p10_us as number).toBeLessThanOrEqual(row.p50_us as number);
      expect(row.p50_us as number).toBeLessThanOrEqual(row.p90_us as number);
    }
    for (const row of rows.filter((r) => r.gap_ms === 0)) expect(row.p50_over_back_to_back).toBe(1);
  }, 120_000);
});
