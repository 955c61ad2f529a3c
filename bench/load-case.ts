// One case of the load benchmark: a server process and client processes, the load between them,
// then the server watched while idle. Returns the merged measurements.
import { fileURLToPath } from 'node:url';
import type { ServerOptions } from '../core/index.ts';
import { LatencyHistogram } from './load-histogram.ts';
import { PeerProcess } from './load-peer.ts';
import type { CallTally, ClientPlan, ClientReport, FromClient, FromServer, KindCount, ServerSnapshot, ToClient, ToServer } from './load-protocol.ts';

/** What a case runs: the clients' plan (without a port), spread over `processes` processes. */
export interface LoadCase extends Omit<ClientPlan, 'port' | 'connections'> {
  name: string;
  connections: number;
  processes: number;
  seconds: number;
  /** The same load before the measured one, unmeasured: pools and caches are touched by then. */
  warmupSeconds: number;
  /** How long the server is watched idle after the load, for its RSS "after". */
  afterMs: number;
}

const MiB = 2 ** 20;
const file = (name: string): string => fileURLToPath(new URL(name, import.meta.url));

/** Latency figures (ms) of a histogram. */
function latency(h: LatencyHistogram): { count: number; p50: number | null; p99: number | null; max: number } {
  const round = (v: number | null): number | null => (v === null ? null : Math.round(v * 100) / 100);
  return { count: h.count, p50: round(h.percentile(50)), p99: round(h.percentile(99)), max: round(h.maxMs)! };
}

function sumCodes(into: Record<string, number>, from: Record<string, number>): Record<string, number> {
  for (const [code, n] of Object.entries(from)) into[code] = (into[code] ?? 0) + n;
  return into;
}

/** The processes' tallies of one kind of call, merged. */
function mergeTallies(tallies: CallTally[], seconds: number) {
  const all = new LatencyHistogram();
  const ok = new LatencyHistogram();
  const errors: Record<string, number> = {};
  let okCalls = 0, okInWindow = 0, bytes = 0;
  for (const t of tallies) {
    all.merge(t.all);
    ok.merge(t.okLatency);
    sumCodes(errors, t.errors);
    okCalls += t.ok;
    okInWindow += t.okInWindow;
    bytes += t.bytesInWindow;
  }
  return { ok: okCalls, calls_per_s: Math.round(okInWindow / seconds), bytes_per_s: Math.round(bytes / seconds), errors, latency_ms: latency(all), ok_latency_ms: latency(ok) };
}

/** RSS figures (MiB): before any call (cold), at go (after the warm-up), the peak while the load
 *  ran, at its end, and after the idle wait. */
function rssFigures(cold: ServerSnapshot, start: ServerSnapshot, end: ServerSnapshot, after: ServerSnapshot, goAt: number, endAt: number) {
  const during = after.rss.filter(([t]) => t >= goAt && t <= endAt).map(([, bytes]) => bytes);
  const mib = (bytes: number): number => Math.round((bytes / MiB) * 10) / 10;
  return {
    rss_mib: { cold: mib(cold.rssBytes), start: mib(start.rssBytes), peak: mib(Math.max(start.rssBytes, end.rssBytes, ...during)), end: mib(end.rssBytes), after: mib(after.rssBytes) },
    heap_mib: Object.fromEntries(Object.entries({ start, end, after }).map(([at, m]) => [at, { total: mib(m.heapTotalBytes), used: mib(m.heapUsedBytes), external: mib(m.externalBytes) }])),
    // Seconds since go, MiB: the shape over time, warm-up included.
    rss_series: after.rss.filter(([t]) => t >= cold.rss.at(-1)![0]).map(([t, bytes]) => [Math.round((t - goAt) / 100) / 10, mib(bytes)]),
  };
}

/** Splits `total` connections over `processes` as evenly as whole numbers allow. */
function share(total: number, processes: number): number[] {
  return Array.from({ length: processes }, (_, i) => Math.floor(total / processes) + (i < total % processes ? 1 : 0)).filter((n) => n > 0);
}

type ServerPeer = PeerProcess<ToServer, FromServer>;
type ClientPeer = PeerProcess<ToClient, FromClient>;

/** What a case saw, before it is merged into figures: the clients' reports and the server around them. */
interface Observed {
  reports: ClientReport[];
  cold: ServerSnapshot; start: ServerSnapshot; end: ServerSnapshot; after: ServerSnapshot; closed: ServerSnapshot;
  goAt: number; endAt: number;
}

async function snapshot(server: ServerPeer, resetStall = false): Promise<ServerSnapshot> {
  server.send({ kind: 'snapshot', resetStall });
  return (await server.next('snapshot', 30_000)).snapshot;
}

/** Warm-up, measured load, idle wait, then the clients close: the server is read between each. */
async function observe(c: LoadCase, server: ServerPeer, clients: ClientPeer[]): Promise<Observed> {
  // Calls still in flight at the end of a run settle within their deadline.
  const run = async (seconds: number): Promise<ClientReport[]> => {
    for (const client of clients) client.send({ kind: 'run', seconds });
    const reports: ClientReport[] = [];
    for (const client of clients) reports.push((await client.next('report', (seconds * 1000) + c.deadlineMs + 60_000)).report);
    return reports;
  };
  const cold = await snapshot(server);
  if (c.warmupSeconds > 0) await run(c.warmupSeconds);
  const start = await snapshot(server, true);
  const goAt = Date.now();
  const reports = await run(c.seconds);
  const endAt = Date.now();
  const end = await snapshot(server);
  await new Promise((resolve) => setTimeout(resolve, c.afterMs));
  const after = await snapshot(server);
  for (const client of clients) client.send({ kind: 'close' });
  await Promise.all(clients.map((client) => client.end(15_000)));
  // The server sees the clients' closes shortly; wait for its count to reach 0 (bounded).
  let closed = await snapshot(server);
  for (let i = 0; i < 50 && closed.connectionCount > 0; i += 1) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    closed = await snapshot(server);
  }
  return { reports, cold, start, end, after, closed, goAt, endAt };
}

/** The figures of a case, merged over its client processes. */
function figures(c: LoadCase, o: Observed) {
  const { reports, after } = o;
  const small = mergeTallies(reports.map((r) => r.small), c.seconds);
  const tensor = mergeTallies(reports.map((r) => r.tensor), c.seconds);
  const examples: Record<string, Record<string, KindCount>> = {};
  for (const r of reports) {
    for (const [code, kinds] of Object.entries(r.examples)) {
      const merged = (examples[code] ??= {});
      for (const [kind, { count, example }] of Object.entries(kinds)) (merged[kind] ??= { count: 0, example }).count += count;
    }
  }
  return {
    calls_per_s: small.calls_per_s + tensor.calls_per_s,
    bytes_per_s: tensor.bytes_per_s,
    calls_ok: small.ok + tensor.ok,
    errors: sumCodes(sumCodes({}, small.errors), tensor.errors),
    client_disconnects: reports.reduce((n, r) => n + r.disconnects, 0),
    disconnect_reasons: [...new Set(reports.flatMap((r) => r.disconnectReasons))].slice(0, 5),
    client_error_events: reports.reduce((n, r) => n + r.clientErrors, 0),
    small, tensor,
    client_max_stall_ms: reports.map((r) => Math.round(r.maxStallMs)),
    drain_ms: Math.round(Math.max(...reports.map((r) => r.drainMs))),
    server: {
      ...rssFigures(o.cold, o.start, o.end, after, o.goAt, o.endAt),
      max_stall_ms: Math.round(after.maxStallMs),
      disconnect_events: after.disconnects,
      disconnect_kinds: after.disconnectKinds,
      error_events: after.errors,
      at_end: { active_calls: o.end.activeCalls, connection_count: o.end.connectionCount },
      after_clients_closed: { active_calls: o.closed.activeCalls, connection_count: o.closed.connectionCount },
    },
    errors_by_kind: examples,
  };
}

/** Runs one case end to end; every process it started is gone when it returns. */
export async function runLoadCase(c: LoadCase, serverOptions: ServerOptions, log: (line: string) => void) {
  const server: ServerPeer = await PeerProcess.start('load server', file('./load-server.ts'), [JSON.stringify(serverOptions)], 60_000);
  const clients: ClientPeer[] = [];
  try {
    const port = server.peer.ready.port as number;
    const starting = share(c.connections, c.processes).map((connections, i) => {
      const plan: ClientPlan = { port, connections, inflight: c.inflight, tensorShare: c.tensorShare, minTensorBytes: c.minTensorBytes, maxTensorBytes: c.maxTensorBytes, deadlineMs: c.deadlineMs };
      return PeerProcess.start<ToClient, FromClient>(`load client ${i}`, file('./load-client.ts'), [JSON.stringify(plan)], 120_000);
    });
    // Every started client is ended in the finally below, those that came up beside one that failed too.
    const started = await Promise.allSettled(starting);
    for (const outcome of started) if (outcome.status === 'fulfilled') clients.push(outcome.value);
    for (const outcome of started) if (outcome.status === 'rejected') throw outcome.reason;
    log(`${c.name}: ${c.connections} connections x ${c.inflight} in flight over ${clients.length} client processes, ${c.warmupSeconds} s warm-up, ${c.seconds} s measured (server pid ${server.pid}, clients ${clients.map((p) => p.pid).join(' ')})`);
    return figures(c, await observe(c, server, clients));
  } finally {
    for (const client of clients) client.kill();
    server.send({ kind: 'close' });
    await server.end(10_000);
  }
}

export type LoadCaseResult = Awaited<ReturnType<typeof runLoadCase>>;
