// bench/chart-bars.ts: one bar per way of moving the same bytes, fastest first, on a log scale.
import { describe, expect, it } from 'vitest';
import { bars, render } from '../../bench/chart-bars.ts';
import type { BenchResult } from '../../bench/machine.ts';

const row = (system: string, p50: number | null): BenchResult => ({ system, workload: 'w<1>', bytes: 1, p50_us: p50, p99_us: null, ops_per_s: null, gbps: null, iterations: 1 } as BenchResult);

describe('chart-bars', () => {
  it('takes the rows and copy rows of every file that have a p50, fastest first', () => {
    const list = bars([{ results: [row('gdrpc a', 2000), row('gdrpc b', null)] }, { results: [row('nixl c', 40)], copy: [row('copy', 7)] }]);
    expect(list.map((b) => [b.label, b.us])).toEqual([['copy: w<1>', 7], ['nixl c: w<1>', 40], ['gdrpc a: w<1>', 2000]]);
  });

  it('draws a bar per row, longer for slower, with escaped labels and times in µs, ms and s', () => {
    const svg = render('t & t', [{ label: 'fast <x>', us: 66 }, { label: 'gdrpc slow', us: 22_200 }, { label: 'nixl slowest', us: 14_180_000 }]);
    expect(svg).toContain('t &amp; t');
    expect(svg).toContain('fast &lt;x&gt;');
    for (const text of ['66.0 µs', '22.2 ms', '14.2 s']) expect(svg).toContain(`>${text}</text>`);
    const widths = [...svg.matchAll(/<rect [^>]*width="([\d.]+)"/g)].map((m) => Number(m[1]));
    expect(widths).toHaveLength(3);
    expect(widths[0]!).toBeLessThan(widths[1]!);
    expect(widths[1]!).toBeLessThan(widths[2]!);
  });
});
