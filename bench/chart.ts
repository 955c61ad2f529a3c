// `node --import tsx bench/chart.ts <results.json> <chart.svg> [more.json ...]`: throughput against
// size, one line per system and workload, from a results file of bench/main.ts (rows with bytes > 0
// and gbps), with the `results` and `copy` rows of any further files measured in the same run (the
// NIXL sweep of bench/nixl_kv_bench.py --sizes) drawn beside them.
// Plain SVG text: no dependencies, viewable in any browser.
import { readFileSync, writeFileSync } from 'node:fs';
import { basename } from 'node:path';
import type { BenchResult } from './machine.ts';

/** Width of the plot area; the legend to its right widens the drawing to fit the longest name. */
const PLOT_WIDTH = 570;
const HEIGHT = 520;
const MARGIN = { left: 70, top: 40, bottom: 60 };
/** Roughly the width of one character of the legend (12 px sans-serif). */
const CHAR_PX = 7;
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf', '#7f7f7f', '#bcbd22'];

/** Lines to draw: one per system/workload, points sorted by size. */
export function series(rows: BenchResult[]): Array<{ name: string; points: Array<[number, number]> }> {
  const byName = new Map<string, Array<[number, number]>>();
  for (const row of rows) {
    if (!(row.bytes > 0) || typeof row.gbps !== 'number' || !(row.gbps > 0)) continue;
    const name = `${row.system} ${row.workload}`;
    byName.set(name, [...(byName.get(name) ?? []), [row.bytes, row.gbps]]);
  }
  return [...byName.entries()].map(([name, points]) => ({ name, points: points.sort((a, b) => a[0] - b[0]) }));
}

function sizeLabel(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${Number.isInteger(value) ? value : value.toFixed(1)} ${units[unit]}`;
}

const escape = (text: string): string => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** The SVG document for `rows` (log-log axes). */
export function renderChart(rows: BenchResult[], title: string): string {
  const lines = series(rows);
  const xs = lines.flatMap((line) => line.points.map((p) => p[0]));
  const ys = lines.flatMap((line) => line.points.map((p) => p[1]));
  if (xs.length === 0) {
    return `<svg xmlns="http://www.w3.org/2000/svg" width="${MARGIN.left + PLOT_WIDTH}" height="80"><text x="10" y="40">${escape(title)}: no throughput rows</text></svg>\n`;
  }
  const [x0, x1] = [Math.log2(Math.min(...xs)), Math.log2(Math.max(...xs))];
  const [y0, y1] = [Math.floor(Math.log10(Math.min(...ys))), Math.ceil(Math.log10(Math.max(...ys)))];
  const plotW = PLOT_WIDTH;
  const legendX = MARGIN.left + plotW + 16;
  const WIDTH = legendX + 42 + CHAR_PX * Math.max(...lines.map((line) => line.name.length)) + 10;
  const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
  const px = (bytes: number): number => MARGIN.left + (x1 === x0 ? plotW / 2 : ((Math.log2(bytes) - x0) / (x1 - x0)) * plotW);
  const py = (gbps: number): number => MARGIN.top + plotH - (y1 === y0 ? plotH / 2 : ((Math.log10(gbps) - y0) / (y1 - y0)) * plotH);
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${MARGIN.left}" y="24" font-size="16">${escape(title)}</text>`,
  ];
  for (let e = y0; e <= y1; e += 1) {
    const y = py(10 ** e);
    out.push(`<line x1="${MARGIN.left}" x2="${MARGIN.left + plotW}" y1="${y}" y2="${y}" stroke="#ddd"/>`,
      `<text x="${MARGIN.left - 8}" y="${y + 4}" text-anchor="end">${10 ** e >= 1 ? 10 ** e : (10 ** e).toPrecision(1)}</text>`);
  }
  for (const bytes of [...new Set(xs)].sort((a, b) => a - b)) {
    const x = px(bytes);
    out.push(`<line x1="${x}" x2="${x}" y1="${MARGIN.top}" y2="${MARGIN.top + plotH}" stroke="#eee"/>`,
      `<text x="${x}" y="${MARGIN.top + plotH + 18}" text-anchor="middle">${sizeLabel(bytes)}</text>`);
  }
  out.push(`<rect x="${MARGIN.left}" y="${MARGIN.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#444"/>`,
    `<text x="${MARGIN.left + plotW / 2}" y="${HEIGHT - 16}" text-anchor="middle">message / tensor size</text>`,
    `<text transform="translate(18 ${MARGIN.top + plotH / 2}) rotate(-90)" text-anchor="middle">GB/s (bytes moved / time)</text>`);
  lines.forEach((line, i) => {
    const color = COLORS[i % COLORS.length];
    const points = line.points.map(([b, g]) => `${px(b).toFixed(1)},${py(g).toFixed(1)}`).join(' ');
    out.push(`<polyline points="${points}" fill="none" stroke="${color}" stroke-width="2"/>`);
    for (const [b, g] of line.points) out.push(`<circle cx="${px(b).toFixed(1)}" cy="${py(g).toFixed(1)}" r="3" fill="${color}"><title>${escape(line.name)}: ${sizeLabel(b)} ${g.toFixed(2)} GB/s</title></circle>`);
    const ly = MARGIN.top + 10 + i * 18;
    out.push(`<line x1="${legendX}" x2="${legendX + 20}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="2"/>`,
      `<text x="${legendX + 26}" y="${ly + 4}">${escape(line.name)}</text>`);
  });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  const [input, output, ...more] = process.argv.slice(2);
  if (!input || !output) {
    console.error('usage: node --import tsx bench/chart.ts <results.json> <chart.svg> [more.json ...]');
    process.exit(2);
  }
  type ResultFile = { results?: BenchResult[]; copy?: BenchResult[]; machine?: { gpus?: string[]; date?: string } };
  const data = JSON.parse(readFileSync(input, 'utf8')) as ResultFile;
  const rows = [...(data.results ?? [])];
  // A system and workload the first file has too (a torch copy measured by both programs) is
  // drawn as its own line, named after the file it came from.
  const lineOf = (row: BenchResult): string => `${row.system}\0${row.workload}`;
  const lines = new Set(rows.map(lineOf));
  for (const file of more) {
    const extra = JSON.parse(readFileSync(file, 'utf8')) as ResultFile;
    const from = basename(file, '.json');
    for (const row of [...(extra.results ?? []), ...(extra.copy ?? [])]) rows.push(lines.has(lineOf(row)) ? { ...row, workload: `${row.workload} (${from})` } : row);
  }
  const title = `gdrpc GPU benchmark${data.machine?.gpus?.length ? ` on ${data.machine.gpus[0]}` : ''}${data.machine?.date ? ` (${data.machine.date.slice(0, 10)})` : ''}`;
  writeFileSync(output, renderChart(rows, title));
  console.log(`chart written to ${output} (${series(rows).length} series)`);
}
