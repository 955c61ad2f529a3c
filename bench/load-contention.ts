// `npm run bench -- contention [--rounds N]`: how much gdrpc and grpc-js slow down when the machine
// is oversubscribed (issue 9, "Degradation under CPU contention"). Each round measures both systems
// of bench/rpc.ts quietly, then again with one busy-loop process per core; the figure is the ratio of
// ratios, gdrpc's slowdown over grpc-js's (at most 1: gdrpc degrades no more than grpc-js does).
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { describeMachine, type BenchResult } from './machine.ts';
import { describeSource, ucxEnvironment } from './load-source.ts';
import { start, type Running } from './process.ts';
import { gdrpcSystem, grpcSystem, latency, rate, throughput, type System } from './rpc.ts';

const MiB = 2 ** 20;
const TENSOR_BYTES = 64 * MiB;
const LATENCY_CALLS = 2000;
/** Longest a hog may live, whatever happens to this process. */
const HOG_LIMIT_MS = 10 * 60_000;

type Phase = 'quiet' | 'hogs';

/** One figure of one workload: how to read it from a row, and whether larger is better. */
interface Figure { workload: string; bytes: number; field: 'p50_us' | 'ops_per_s' | 'gbps'; higherIsBetter: boolean }

const FIGURES: Record<string, Figure> = {
  small_call_rtt_p50: { workload: 'unary_small_rtt', bytes: 0, field: 'p50_us', higherIsBetter: false },
  small_calls_per_s_64_in_flight: { workload: 'unary_calls_per_s_64_in_flight', bytes: 0, field: 'ops_per_s', higherIsBetter: true },
  tensor_64MiB_host: { workload: 'tensor_arg_host', bytes: TENSOR_BYTES, field: 'gbps', higherIsBetter: true },
};

/** The machine's busy and total CPU time so far (/proc/stat, all cores; null off Linux). */
function cpuTimes(): { busy: number; total: number } | null {
  try {
    const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    const total = fields.reduce((a, b) => a + b, 0);
    return { busy: total - fields[3]! - fields[4]!, total };
  } catch {
    return null;
  }
}

type Measured = BenchResult & { busy_cores: number | null };

/** One workload, with how many of the machine's cores were busy while it ran (both peers, and
 *  anything else running: the hogs, in that phase). */
async function withBusyCores(work: () => Promise<BenchResult>): Promise<Measured> {
  const before = cpuTimes();
  const row = await work();
  const after = cpuTimes();
  const busy = before === null || after === null || after.total === before.total ? null
    : Math.round(((after.busy - before.busy) / (after.total - before.total)) * availableParallelism() * 100) / 100;
  return { ...row, busy_cores: busy };
}

async function measure(make: () => Promise<System>): Promise<Measured[]> {
  const system = await make();
  try {
    return [
      await withBusyCores(() => latency(system, LATENCY_CALLS)),
      await withBusyCores(() => rate(system)),
      await withBusyCores(() => throughput(system, TENSOR_BYTES)),
    ];
  } finally {
    await system.close();
  }
}

/** Busy loops, one per core, each in a process group of its own with a hard time limit. */
async function startHogs(): Promise<Running[]> {
  const hogs = Array.from({ length: availableParallelism() }, () => start(process.execPath, ['-e', 'for (;;) {}'], { limitMs: HOG_LIMIT_MS }));
  // Let them take the cores before anything is measured.
  await new Promise((resolve) => setTimeout(resolve, 1000));
  return hogs;
}

function median(values: number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)]!;
}

/** Medians per system and phase, each system's slowdown (hogs over quiet, >1 is slower) and their ratio. */
function summarise(rows: Array<Measured & { phase: Phase }>) {
  const summary: Record<string, object> = {};
  for (const [name, figure] of Object.entries(FIGURES)) {
    const of = (system: string, phase: Phase, field: Figure['field'] | 'busy_cores' = figure.field): number | null => median(rows
      .filter((r) => r.system === system && r.phase === phase && r.workload === figure.workload && r.bytes === figure.bytes)
      .map((r) => r[field]).filter((v): v is number => v !== null));
    const slowdown = (system: string): number | null => {
      const quiet = of(system, 'quiet');
      const hogs = of(system, 'hogs');
      if (quiet === null || hogs === null) return null;
      return figure.higherIsBetter ? quiet / hogs : hogs / quiet;
    };
    const gdrpc = slowdown('gdrpc');
    const grpcJs = slowdown('grpc-js');
    const ratio = gdrpc === null || grpcJs === null ? null : gdrpc / grpcJs;
    summary[name] = {
      field: figure.field,
      gdrpc: { quiet: of('gdrpc', 'quiet'), hogs: of('gdrpc', 'hogs'), slowdown: gdrpc, busy_cores_quiet: of('gdrpc', 'quiet', 'busy_cores') },
      grpc_js: { quiet: of('grpc-js', 'quiet'), hogs: of('grpc-js', 'hogs'), slowdown: grpcJs, busy_cores_quiet: of('grpc-js', 'quiet', 'busy_cores') },
      ratio_of_ratios: ratio,
      goal_gdrpc_degrades_no_more_than_grpc_js: ratio !== null && ratio <= 1,
    };
    const fixed = (v: number | null): string => (v === null ? '-' : v.toFixed(2));
    console.log(`${name.padEnd(32)} slowdown gdrpc ${fixed(gdrpc)}x, grpc-js ${fixed(grpcJs)}x, ratio of ratios ${fixed(ratio)}; `
      + `busy cores when quiet: gdrpc ${fixed(of('gdrpc', 'quiet', 'busy_cores'))}, grpc-js ${fixed(of('grpc-js', 'quiet', 'busy_cores'))}`);
  }
  return summary;
}

/** Runs `rounds` rounds (default 3) of quiet then contended measurements; medians per phase. */
export async function runContentionBench(opts: { json?: string; flags?: string[] } = {}): Promise<object> {
  const flags = opts.flags ?? [];
  const at = flags.indexOf('--rounds');
  const rounds = at >= 0 ? Number(flags[at + 1]) : 3;
  if (!Number.isInteger(rounds) || rounds <= 0 || flags.length !== (at >= 0 ? 2 : 0)) {
    throw new Error('usage: npm run bench -- contention [--json <file>] [--rounds N]');
  }
  const rows: Array<Measured & { phase: Phase; round: number }> = [];
  for (let round = 1; round <= rounds; round += 1) {
    for (const phase of ['quiet', 'hogs'] as const) {
      const hogs = phase === 'hogs' ? await startHogs() : [];
      try {
        for (const make of [() => gdrpcSystem(), grpcSystem]) {
          for (const row of await measure(make)) {
            rows.push({ ...row, phase, round });
            const figure = row.gbps !== null ? `${row.gbps.toFixed(2)} GB/s` : row.p50_us !== null ? `p50 ${row.p50_us.toFixed(1)} us` : `${Math.round(row.ops_per_s ?? 0)} /s`;
            console.log(`round ${round} ${phase.padEnd(5)} ${row.system.padEnd(8)} ${row.workload.padEnd(32)} ${figure}`);
          }
        }
      } finally {
        for (const hog of hogs) hog.kill();
        await Promise.all(hogs.map((hog) => hog.finished));
      }
    }
  }
  return {
    machine: describeMachine(),
    source: describeSource(),
    // As this process ran them (gdrpc's defaults included); the peer processes inherit them.
    ucx_environment: ucxEnvironment(),
    what: 'bench/rpc.ts workloads, quiet and with one busy-loop process per core (issue 9, CPU contention)',
    hogs: availableParallelism(), rounds,
    notes: 'slowdown: hogs over quiet for latency, quiet over hogs for rates (>1 is slower); ratio_of_ratios = gdrpc slowdown / grpc-js slowdown; medians over rounds. '
      + 'busy_cores: cores of the whole machine busy while the workload ran (/proc/stat). With one hog per core, the two peer processes get about '
      + 'two of (2 + cores) shares of the machine, one core on a 2-core box: a system that kept more cores busy when quiet has more to lose.',
    summary: summarise(rows),
    rows,
  };
}
