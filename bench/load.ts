// `npm run bench -- load`: gdrpc under load (issue 9, "Overload is impolite"), peers in separate
// processes on loopback. Cases: "mixed" (200 connections x 64 calls in flight, 10% of calls carrying
// a 1-16 MiB host tensor, 30 s deadlines), "soak" (the same for 5 minutes with 5% tensors) and
// "small" (small calls only). Each case reports rates, errors by code, disconnects, small-call
// latency, event-loop stalls, the server's RSS over time, and the issue's goals judged from them.
import type { ServerOptions } from '../core/index.ts';
import { runLoadCase, type LoadCase, type LoadCaseResult } from './load-case.ts';
import { describeMachine } from './machine.ts';
import { describeSource } from './load-source.ts';
import type { KindCount } from './load-protocol.ts';

const MiB = 2 ** 20;
/** Unmeasured load before each case, so that RSS "start" includes the pools the load touches. */
const WARMUP_SECONDS = 5;
/** How long the server idles after the load before RSS "after" is read (--after-seconds). */
const AFTER_SECONDS = 30;
const CASES = ['mixed', 'soak', 'small'] as const;
type CaseName = (typeof CASES)[number];

const USAGE = 'usage: npm run bench -- load [--json <file>] [--seconds N] [--soak-seconds N] [--small-seconds N] '
  + '[--connections N] [--inflight N] [--processes N] [--after-seconds N] [--cases mixed,soak,small]';

interface LoadFlags { seconds: number; soakSeconds: number; smallSeconds: number; connections: number; inflight: number; processes: number; afterSeconds: number; cases: CaseName[] }

function parseFlags(flags: string[]): LoadFlags {
  const parsed: LoadFlags = { seconds: 60, soakSeconds: 300, smallSeconds: 15, connections: 200, inflight: 64, processes: 4, afterSeconds: AFTER_SECONDS, cases: [...CASES] };
  const numeric: Record<string, Exclude<keyof LoadFlags, 'cases'>> = {
    '--seconds': 'seconds', '--soak-seconds': 'soakSeconds', '--small-seconds': 'smallSeconds',
    '--connections': 'connections', '--inflight': 'inflight', '--processes': 'processes', '--after-seconds': 'afterSeconds',
  };
  for (let i = 0; i < flags.length; i += 2) {
    const [flag, value] = [flags[i]!, flags[i + 1]];
    if (flag === '--cases' && value !== undefined) {
      const names = value.split(',');
      const unknown = names.find((n) => !(CASES as readonly string[]).includes(n));
      if (unknown !== undefined) throw new Error(`unknown case ${unknown}\n${USAGE}`);
      parsed.cases = names as CaseName[];
      continue;
    }
    const key = numeric[flag];
    const n = Number(value);
    if (key === undefined || !Number.isInteger(n) || n <= 0) throw new Error(`bad flag ${flag} ${value ?? ''}\n${USAGE}`);
    parsed[key] = n;
  }
  // The small case is a short rate measurement: never longer than the mixed one.
  if (!flags.includes('--small-seconds')) parsed.smallSeconds = Math.min(parsed.smallSeconds, parsed.seconds);
  return parsed;
}

function caseOf(name: CaseName, f: LoadFlags): LoadCase {
  const common = {
    name, connections: f.connections, inflight: f.inflight, processes: Math.min(f.processes, f.connections), deadlineMs: 30_000,
    minTensorBytes: MiB, maxTensorBytes: 16 * MiB, warmupSeconds: Math.min(WARMUP_SECONDS, f.seconds), afterMs: f.afterSeconds * 1000,
  };
  if (name === 'mixed') return { ...common, seconds: f.seconds, tensorShare: 0.1 };
  if (name === 'soak') return { ...common, seconds: f.soakSeconds, tensorShare: 0.05 };
  return { ...common, seconds: f.smallSeconds, tensorShare: 0 };
}

/** Little's law for this closed loop: every lane always has one call in flight, so the mean time a
 *  call takes is the calls in flight over the rate at which calls settle (any outcome). This is what
 *  any server settling calls at the measured rate would show; a latency goal below it needs a
 *  higher rate, not a different queue. */
function littleBound(c: LoadCase, r: LoadCaseResult) {
  const settled = r.small.latency_ms.count + r.tensor.latency_ms.count;
  const inFlight = c.connections * c.inflight;
  const settledPerS = settled / c.seconds;
  return {
    calls_in_flight: inFlight,
    settled_per_s: Math.round(settledPerS),
    mean_latency_ms: settledPerS > 0 ? Math.round((inFlight / settledPerS) * 1000 * 10) / 10 : null,
    settled_per_s_for_100ms_mean: inFlight * 10,
  };
}

/** The issue's goals, judged from what was measured. */
function goals(r: LoadCaseResult) {
  const p99 = r.small.latency_ms.p99;
  const { start, after } = r.server.rss_mib;
  return {
    no_disconnects: r.client_disconnects === 0 && r.server.disconnect_events === 0,
    no_unavailable: (r.errors.UNAVAILABLE ?? 0) === 0,
    small_p99_at_most_100ms: p99 !== null && p99 <= 100,
    rss_after_within_10pct_of_start: after <= start * 1.1,
    // The same against the RSS before the first call (pool pages untouched); stricter, for reference.
    rss_after_within_10pct_of_cold: after <= r.server.rss_mib.cold * 1.1,
  };
}

const ms = (v: number | null): string => (v === null ? '-' : v < 10 ? v.toFixed(2) : Math.round(v).toLocaleString('en-US'));

function summarise(c: LoadCase, r: LoadCaseResult, g: ReturnType<typeof goals>, little: ReturnType<typeof littleBound>): string {
  const errors = Object.entries(r.errors).map(([code, n]) => `${code} ${n.toLocaleString('en-US')}`).join(', ') || 'none';
  const s = r.small.latency_ms;
  const rss = r.server.rss_mib;
  return [
    `${c.name}: ${Math.round(r.calls_per_s).toLocaleString('en-US')} calls/s, ${(r.bytes_per_s / 1e9).toFixed(2)} GB/s of tensors, ${r.calls_ok.toLocaleString('en-US')} calls ok; errors: ${errors}; disconnects: ${r.client_disconnects} (server saw ${r.server.disconnect_events})`,
    `  small calls ms: p50 ${ms(s.p50)} p99 ${ms(s.p99)} max ${ms(s.max)}; longest stall ms: clients ${r.client_max_stall_ms.join('/')}, server ${r.server.max_stall_ms}; drain ${r.drain_ms} ms`,
    `  Little's law: ${little.calls_in_flight.toLocaleString('en-US')} calls in flight / ${little.settled_per_s.toLocaleString('en-US')} settled per s = ${ms(little.mean_latency_ms)} ms mean for any call (a 100 ms mean needs ${little.settled_per_s_for_100ms_mean.toLocaleString('en-US')} per s)`,
    `  server RSS MiB: cold ${rss.cold} start ${rss.start} peak ${rss.peak} end ${rss.end} after ${rss.after}; at end ${r.server.at_end.active_calls} calls, ${r.server.at_end.connection_count} connections`,
    ...kindLines('error', r.errors_by_kind),
    ...kindLines('server closed a connection', { disconnect: r.server.disconnect_kinds }),
    `  goals: ${Object.entries(g).map(([name, met]) => `${name} ${met ? 'met' : 'MISSED'}`).join(', ')}`,
  ].join('\n');
}

/** One line per kind of message, most frequent first, with its count and first example. */
function kindLines(what: string, byCode: Record<string, Record<string, KindCount>>): string[] {
  const kinds = Object.entries(byCode).flatMap(([code, kinds]) => Object.values(kinds).map((k) => ({ code, ...k })));
  kinds.sort((a, b) => b.count - a.count);
  return kinds.map((k) => `  ${what} ${k.code === 'disconnect' ? '' : `${k.code} `}x${k.count.toLocaleString('en-US')}: ${k.example.length > 200 ? `${k.example.slice(0, 200)}...` : k.example}`);
}

/** Runs the cases the flags ask for (all three by default). */
export async function runLoadBench(opts: { json?: string; flags?: string[] } = {}): Promise<object> {
  const flags = parseFlags(opts.flags ?? []);
  // Loopback connections all come from one address, which plays every client: its per-address
  // limits are lifted to the server's own (maxCalls 4,096); the rest are the server's defaults.
  const serverOptions: ServerOptions = { maxConnectionsPerAddress: Math.max(64, flags.connections), maxCallsPerAddress: 4096 };
  const results: Record<string, object> = {};
  for (const name of flags.cases) {
    const c = caseOf(name, flags);
    const parameters = {
      seconds: c.seconds, warmup_seconds: c.warmupSeconds, connections: c.connections, inflight: c.inflight, client_processes: c.processes,
      tensor_share: c.tensorShare, tensor_bytes: [c.minTensorBytes, c.maxTensorBytes], deadline_ms: c.deadlineMs, after_ms: c.afterMs,
    };
    try {
      const r = await runLoadCase(c, serverOptions, (line) => console.log(line));
      const g = goals(r);
      const little = littleBound(c, r);
      console.log(summarise(c, r, g, little));
      results[name] = { parameters, goals: g, little_law: little, ...r };
    } catch (error) {
      // One case that could not run (a peer died, a handshake timed out) leaves the others to run.
      console.error(`${name}: did not complete: ${String(error)}`);
      results[name] = { parameters, failed: String(error) };
    }
  }
  return {
    machine: describeMachine(),
    source: describeSource(),
    what: 'gdrpc under load, server and clients in separate processes on loopback (issue 9)',
    server_options: { ...serverOptions, note: 'every other ServerOptions field at its default' },
    client_options: 'defaults; each connection is its own Client, clients of a process share its worker',
    notes: 'calls_per_s and bytes_per_s count successful calls that ended inside the load window. Latencies are per call, '
      + 'whatever the outcome (ok_latency_ms: successful calls only). Stalls: the longest lateness of a 10 ms timer in each process. '
      + 'Disconnects count the whole life of the connections, warm-up included. RSS cold: before any call; start: at go, after '
      + 'warmupSeconds of the same load; peak: 1 s samples during the load; end: when the last call settled; after: after_ms later, connections still open. '
      + 'little_law: calls in flight (connections x inflight, a closed loop) over calls settled per second (any outcome) is the mean latency any server settling calls at that rate shows.',
    cases: results,
  };
}
