// `node --import tsx bench/chart-bars.ts <chart.svg> <title> <results.json>...`: one horizontal bar
// per row (results and copy) of one or more results files, its p50 time on a log scale, fastest
// first: for benches that move the same bytes many ways (kv-blocks against NIXL and the raw copy),
// where a rate-by-size chart (chart.ts) has one point per line.
import { readFileSync, writeFileSync } from 'node:fs';
import type { BenchResult } from './machine.ts';

const WIDTH = 900;
const ROW = 26;
const MARGIN = { left: 330, right: 90, top: 50, bottom: 50 };

interface Bar { label: string; us: number }

/** The rows of the files given that have a p50 time, fastest first. */
export function bars(files: ReadonlyArray<{ results?: BenchResult[]; copy?: BenchResult[] }>): Bar[] {
  const rows = files.flatMap((file) => [...(file.results ?? []), ...(file.copy ?? [])]);
  return rows.filter((row) => typeof row.p50_us === 'number' && row.p50_us > 0)
    .map((row) => ({ label: `${row.system}: ${row.workload}`, us: row.p50_us! }))
    .sort((a, b) => a.us - b.us);
}

function timeLabel(us: number): string {
  if (us >= 1e6) return `${Number((us / 1e6).toPrecision(3))} s`;
  return us >= 1000 ? `${(us / 1000).toFixed(us >= 100_000 ? 0 : 1)} ms` : `${us.toFixed(us >= 100 ? 0 : 1)} µs`;
}

function escape(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

export function render(title: string, list: Bar[]): string {
  const height = MARGIN.top + MARGIN.bottom + list.length * ROW;
  const low = Math.floor(Math.log10(Math.min(...list.map((b) => b.us))));
  const high = Math.ceil(Math.log10(Math.max(...list.map((b) => b.us))));
  const span = Math.max(1, high - low);
  const x = (us: number): number => MARGIN.left + ((Math.log10(us) - low) / span) * (WIDTH - MARGIN.left - MARGIN.right);
  const parts = [`<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" font-family="sans-serif" font-size="12">`,
    `<text x="${WIDTH / 2}" y="24" text-anchor="middle" font-size="14">${escape(title)}</text>`];
  for (let decade = low; decade <= high; decade += 1) {
    const at = x(10 ** decade);
    parts.push(`<line x1="${at}" y1="${MARGIN.top - 6}" x2="${at}" y2="${height - MARGIN.bottom}" stroke="#ddd"/>`,
      `<text x="${at}" y="${height - MARGIN.bottom + 16}" text-anchor="middle">${timeLabel(10 ** decade)}</text>`);
  }
  parts.push(`<text x="${(MARGIN.left + WIDTH - MARGIN.right) / 2}" y="${height - 12}" text-anchor="middle">p50 time, log scale (shorter is faster)</text>`);
  for (const [i, bar] of list.entries()) {
    const y = MARGIN.top + i * ROW;
    const color = bar.label.startsWith('gdrpc') ? '#1f77b4' : bar.label.startsWith('nixl') ? '#d62728' : '#7f7f7f';
    parts.push(`<text x="${MARGIN.left - 8}" y="${y + 15}" text-anchor="end">${escape(bar.label)}</text>`,
      `<rect x="${MARGIN.left}" y="${y + 3}" width="${Math.max(1, x(bar.us) - MARGIN.left)}" height="${ROW - 8}" fill="${color}"/>`,
      `<text x="${x(bar.us) + 6}" y="${y + 15}">${timeLabel(bar.us)}</text>`);
  }
  parts.push('</svg>');
  return parts.join('\n');
}

if (process.argv[1]?.endsWith('chart-bars.ts')) {
  const [out, title, ...inputs] = process.argv.slice(2);
  if (out === undefined || title === undefined || inputs.length === 0) throw new Error('usage: chart-bars.ts <chart.svg> <title> <results.json>...');
  const list = bars(inputs.map((path) => JSON.parse(readFileSync(path, 'utf8')) as { results?: BenchResult[]; copy?: BenchResult[] }));
  writeFileSync(out, render(title, list));
  console.log(`wrote ${out}: ${list.length} bars`);
}
