// Tag ping-pong latency and tag bandwidth between two Node processes through the binding, side by
// side with ucx_perftest (shipped with the UCX install) on the same transport, with the same UCX
// settings and PEER error mode (-e), so the cost of the binding is visible as a ratio.
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Context, Worker, Endpoint, MemoryRegion, type MemorySpan } from '../core/ucx/index.ts';
import { describeMachine, percentile, type BenchResult } from './machine.ts';
import { perftest, ucxHome } from './perftest.ts';
import { spawnPeer } from '../test/support/peer.ts';

const TAG_DATA = 1n;
const TAG_REPLY = 2n;
const FULL_MASK = 0xffff_ffff_ffff_ffffn;
const root = fileURLToPath(new URL('..', import.meta.url));

/** UCX_TLS per transport. Client-server wire-up needs tcp beside the shared-memory transports;
 *  UCX then puts the data lanes on posix/sysv/cma (the lanes are recorded in the results). */
const TRANSPORTS: Record<string, string> = { tcp: 'tcp,self', shm: 'posix,sysv,cma,self,tcp' };

interface Session { worker: Worker; span: MemorySpan; ep: Endpoint }

/** Starts a peer in `mode`, connects a client worker to it, runs `body`, and tears both down
 *  (the peer is killed if it has not finished a few seconds after the client closed). */
async function withPeer<T>(mode: 'pingpong' | 'stream', tls: string, size: number, iters: number, busyPollUs: number,
  body: (session: Session) => Promise<T>): Promise<T> {
  const env = { UCX_TLS: tls, GDRPC_BENCH_BUSY_POLL_US: String(busyPollUs) };
  const peer = await spawnPeer<{ port: number }>(join(root, 'bench/ucx-peer.ts'), { args: [mode, String(size), String(iters)], env });
  const context = Context.create({ config: { TLS: tls } });
  const worker = Worker.create(context, { busyPollUs });
  const region = MemoryRegion.map(context, new ArrayBuffer(Math.max(size, 8)));
  const ep = Endpoint.connect(worker, { host: '127.0.0.1', port: peer.ready.port });
  try {
    // Connection set-up stays out of the timing.
    await ep.flush();
    return await body({ worker, span: region.span(0, size), ep });
  } finally {
    // Closing the worker cancels what is still posted; only then may the region go.
    await ep.close();
    await worker.close();
    region.close();
    context.close();
    await peer.end(5000);
  }
}

/** Round trips of `size`-byte tag messages; the samples in microseconds and the lanes used. */
export function nodePingPong(tls: string, size: number, iters: number, busyPollUs = 0): Promise<{ samples: number[]; lanes: string[] }> {
  return withPeer('pingpong', tls, size, iters, busyPollUs, async ({ worker, span, ep }) => {
    const samples: number[] = [];
    const lanes = [...new Set(ep.transports().map((t) => t.transport))];
    for (let i = 0; i < iters; i++) {
      const t0 = process.hrtime.bigint();
      const reply = worker.tagRecv(span, TAG_REPLY, FULL_MASK);
      await Promise.all([ep.tagSend(TAG_DATA, span), reply]);
      samples.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
    return { samples, lanes };
  });
}

/** Seconds to stream `iters` tag messages of `size` bytes, 32 in flight, until the peer's ack. */
export function nodeStream(tls: string, size: number, iters: number, busyPollUs = 0): Promise<number> {
  return withPeer('stream', tls, size, iters, busyPollUs, async ({ worker, span, ep }) => {
    const done = worker.tagRecv(new Uint8Array(8), TAG_REPLY, FULL_MASK);
    const t0 = process.hrtime.bigint();
    const window = 32;
    const inflight: Promise<void>[] = [];
    for (let i = 0; i < iters; i++) {
      inflight.push(ep.tagSend(TAG_DATA, span));
      if (inflight.length >= window) await inflight.shift();
    }
    await Promise.all(inflight);
    await done;
    return Number(process.hrtime.bigint() - t0) / 1e9;
  });
}

function row(system: string, workload: string, bytes: number, fields: Partial<BenchResult>): BenchResult {
  return { system, workload, bytes, p50_us: null, p99_us: null, ops_per_s: null, gbps: null, ...fields };
}

const LAT_SIZE = 8;
const LAT_ITERS = 20_000;
const BW_SIZES = [64 * 1024, 1 << 20, 64 << 20];

function bwIters(size: number): number {
  return Math.max(20, Math.min(4000, Math.floor((4 << 30) / size / 4)));
}

/** `npm run bench -- ucx`: binding vs ucx_perftest, per transport. */
/** Progress modes of the binding: event-driven (the default) and a busy-poll window, which is
 *  how ucx_perftest itself runs. */
const MODES = [
  { system: 'gdrpc-binding', busyPollUs: 0 },
  { system: 'gdrpc-binding-busypoll', busyPollUs: 1000 },
];

/** `npm run bench -- ucx`: binding vs ucx_perftest, per transport. */
export async function runUcxBench(_opts: { json?: string }): Promise<object> {
  const home = ucxHome();
  const results: BenchResult[] = [];
  const ratios: Array<Record<string, unknown>> = [];
  for (const [transport, tls] of Object.entries(TRANSPORTS)) {
    const perf = new Map<string, number>();
    if (home) {
      // tag_lat reports half a round trip: double it to compare round trips.
      const lat = (rank: number): string[] => ['-t', 'tag_lat', '-s', String(LAT_SIZE), '-n', String(LAT_ITERS), '-R', String(rank), '-e'];
      const p50 = (await perftest(home, lat(50), 120_000, { UCX_TLS: tls }))[1]! * 2;
      const p99 = (await perftest(home, lat(99), 120_000, { UCX_TLS: tls }))[1]! * 2;
      results.push(row('ucx_perftest', `tag_pingpong_rtt/${transport}`, LAT_SIZE, { p50_us: p50, p99_us: p99, ops_per_s: 1e6 / p50 }));
      perf.set('lat', p50);
      for (const size of BW_SIZES) {
        const f = await perftest(home, ['-t', 'tag_bw', '-s', String(size), '-n', String(bwIters(size)), '-e'], 120_000, { UCX_TLS: tls });
        const gbps = f[5]! * 2 ** 20 / 1e9; // MB/s in ucx_perftest is MiB/s
        results.push(row('ucx_perftest', `tag_bw/${transport}`, size, { gbps, ops_per_s: f[7]! }));
        perf.set(`bw${size}`, gbps);
      }
    }
    for (const { system, busyPollUs } of MODES) {
      const pingpong = await nodePingPong(tls, LAT_SIZE, LAT_ITERS, busyPollUs);
      const lat = pingpong.samples.slice(1000).sort((a, b) => a - b);
      const p50 = percentile(lat, 50);
      results.push(row(system, `tag_pingpong_rtt/${transport}`, LAT_SIZE,
        { lanes: pingpong.lanes, p50_us: p50, p99_us: percentile(lat, 99), ops_per_s: 1e6 / (lat.reduce((a, b) => a + b, 0) / lat.length) }));
      if (perf.has('lat')) ratios.push({ system, workload: `tag_pingpong_rtt/${transport}`, binding_over_perftest_p50: p50 / perf.get('lat')! });
      for (const size of BW_SIZES) {
        const iters = bwIters(size);
        await nodeStream(tls, size, Math.min(iters, 10), busyPollUs); // warm-up run
        const seconds = await nodeStream(tls, size, iters, busyPollUs);
        const gbps = (size * iters) / seconds / 1e9;
        results.push(row(system, `tag_bw/${transport}`, size, { gbps, ops_per_s: iters / seconds }));
        const base = perf.get(`bw${size}`);
        if (base) ratios.push({ system, workload: `tag_bw/${transport}`, bytes: size, binding_over_perftest_gbps: gbps / base });
      }
    }
  }
  for (const r of results) {
    console.log(`${r.system.padEnd(24)} ${r.workload.padEnd(24)} ${String(r.bytes).padStart(9)}  ` +
      (r.p50_us !== null ? `p50 ${r.p50_us.toFixed(2)} us  p99 ${r.p99_us!.toFixed(2)} us` : `${r.gbps!.toFixed(2)} GB/s`));
  }
  for (const r of ratios) console.log(JSON.stringify(r));
  return { machine: describeMachine(), perftest: home ? join(home, 'bin/ucx_perftest') : null, results, ratios };
}
