// gdrpc against @grpc/grpc-js on the same workloads, between two processes: small-call round
// trip, calls/s with 64 in flight, tensor (bytes) throughput from 4 KiB to 256 MiB, and, for
// gdrpc only, each mover per size (the table behind the 'auto' choice in core/rpc/movers).
import * as grpc from '@grpc/grpc-js';
import { describeMachine, percentile, type BenchResult } from './machine.ts';
import { gdrpcSystem, startPeer, type System } from './rpc-gdrpc.ts';
import { unsafeRmaEnabled } from '../core/rpc/runtime/runtime.ts';
import { runUcxCall } from './ucx-call.ts';
import { warmUp } from './warm.ts';

const KiB = 1024;
const MiB = 1024 * KiB;
export { gdrpcSystem, type System } from './rpc-gdrpc.ts';
const TENSOR_SIZES = [4 * KiB, 64 * KiB, MiB, 16 * MiB, 64 * MiB, 256 * MiB];
const MOVER_SIZES = [256, 4 * KiB, 8 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB];
const LATENCY_CALLS = 20_000;
const IN_FLIGHT = 64;
const RATE_SECONDS = 2;
const RATE_WINDOWS = 3;
/** Busy-poll window of the second gdrpc configuration. */
const BUSY_POLL_US = 100;

export async function grpcSystem(): Promise<System> {
  const peer = await startPeer('grpc');
  const client = new grpc.Client(`127.0.0.1:${peer.ready.port}`, grpc.credentials.createInsecure(),
    { 'grpc.max_receive_message_length': -1, 'grpc.max_send_message_length': -1 });
  const identity = (b: Buffer): Buffer => b;
  const call = (path: string, body: Buffer): Promise<void> => new Promise((resolve, reject) => {
    client.makeUnaryRequest(path, identity, identity, body, (error) => (error ? reject(error) : resolve()));
  });
  const empty = Buffer.alloc(0);
  const bodies = new Map<number, Buffer>();
  return {
    name: 'grpc-js',
    ping: () => call('/bench.Bench/ping', empty),
    sink: (bytes) => {
      let body = bodies.get(bytes);
      if (body === undefined) { body = Buffer.alloc(bytes, 7); bodies.clear(); bodies.set(bytes, body); }
      return call('/bench.Bench/sink', body);
    },
    close: async () => { client.close(); await peer.end(5000); },
  };
}

function row(system: string, workload: string, bytes: number, fields: Partial<BenchResult>): BenchResult {
  return { system, workload, bytes, p50_us: null, p99_us: null, ops_per_s: null, gbps: null, ...fields };
}

export async function latency(system: System, calls: number): Promise<BenchResult> {
  const warmed = await warmUp(() => system.ping());
  const samples: number[] = [];
  for (let i = 0; i < calls; i += 1) {
    const t0 = process.hrtime.bigint();
    await system.ping();
    samples.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  samples.sort((a, b) => a - b);
  return row(system.name, 'unary_small_rtt', 0, { p50_us: percentile(samples, 50), p99_us: percentile(samples, 99), ops_per_s: 1e6 / percentile(samples, 50), warm_calls: warmed.calls, warm_first_p50_us: warmed.firstP50Us, warm_last_p50_us: warmed.lastP50Us });
}

/** Calls/s with IN_FLIGHT calls in flight: the median of RATE_WINDOWS windows of RATE_SECONDS
 *  (one window on this noisy 2-core box ranged 80-100k for the same build); every window's rate
 *  is in the row. Small calls by default; `tensorBytes`: calls carrying one host tensor of that
 *  size by tag, with the server's pool in use (tensor rows before), as a server under load has it. */
export async function rate(system: System, tensorBytes?: number): Promise<BenchResult> {
  const call = tensorBytes === undefined ? () => system.ping() : () => system.sink(tensorBytes, 'tag');
  const windows: number[] = [];
  for (let w = 0; w < RATE_WINDOWS; w += 1) {
    let done = 0;
    const until = performance.now() + RATE_SECONDS * 1000;
    const t0 = performance.now();
    await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
      while (performance.now() < until) { await call(); done += 1; }
    }));
    windows.push(Math.round(done / ((performance.now() - t0) / 1000)));
  }
  const sorted = [...windows].sort((x, y) => x - y);
  const workload = tensorBytes === undefined ? `unary_calls_per_s_${IN_FLIGHT}_in_flight` : `tensor_calls_per_s_${IN_FLIGHT}_in_flight`;
  return row(system.name, workload, tensorBytes ?? 0, { ops_per_s: sorted[Math.floor(sorted.length / 2)]!, windows, iterations: RATE_WINDOWS });
}

export async function throughput(system: System, bytes: number, mover?: 'inline' | 'tag' | 'rma'): Promise<BenchResult> {
  await system.sink(bytes, mover);
  const samples: number[] = [];
  const budgetMs = bytes >= 64 * MiB ? 2500 : 800;
  const started = performance.now();
  while (samples.length < 3 || (performance.now() - started < budgetMs && samples.length < 2000)) {
    const t0 = process.hrtime.bigint();
    await system.sink(bytes, mover);
    samples.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  samples.sort((a, b) => a - b);
  const p50 = percentile(samples, 50);
  const workload = mover === undefined ? 'tensor_arg_host' : `mover_${mover}_host`;
  return row(system.name, workload, bytes, { p50_us: p50, p99_us: percentile(samples, 99), ops_per_s: 1e6 / p50, gbps: bytes / (p50 * 1000) });
}

/** Each of a system's tensor paths is warmed (bench/warm.ts) before its first tensor row: gdrpc's
 *  4 KiB call took about 300 us for its first 1,500 calls and 60 us from the 2,500th on (a scratch
 *  run of 500-call rounds), so rows timed cold measured the warm-up. */
/** One size per path the default mover takes: 4 KiB goes inline (DEFAULT_INLINE_BYTES), 64 KiB by
 *  tag. Warming 4 KiB alone left the tag path cold: the default 64 KiB row then came out at
 *  387 us against 50 us for the same calls with the tag mover forced, timed after the rest (one
 *  run, 2-core box), and 64 KiB calls timed from a cold start took 400-600 us p50 per window of
 *  500 calls until about the 3,000th, then 50-70 us (scratch). */
const WARM_SIZES = [4 * KiB, 64 * KiB];

async function warmTensorPath(system: System): Promise<void> {
  for (const bytes of WARM_SIZES) await warmUp(() => system.sink(bytes), { minCalls: 3000 });
}

/** Runs every workload on gdrpc (default, and busy-polling for the small-call rows) and grpc-js;
 *  rows of gdrpc carry their ratio to grpc-js. The C floor (bench/ucx-call.c: the same round trip
 *  over the same UCX, both sides spinning, the server asleep between calls, or both asleep) runs
 *  beside them where it can be built. */
export async function runRpcBench(_opts: { json?: string } = {}): Promise<object> {
  const results: BenchResult[] = [];
  const skipped: { system: string; reason: string }[] = [];
  // The last variant is trusted peers over shared memory (RuntimeOptions.sharedMemory), as the
  // gdrpc-shm system below.
  const floors = [
    { wait: 'none', sizes: [0, 4 * KiB, 64 * KiB, MiB], sharedMemory: false },
    { wait: 'server', sizes: [0, 4 * KiB], sharedMemory: false },
    { wait: 'both', sizes: [0, 4 * KiB], sharedMemory: false },
    { wait: 'none', sizes: [0, 4 * KiB, 64 * KiB, MiB], sharedMemory: true },
  ] as const;
  for (const { wait, sizes, sharedMemory } of floors) {
    const floor = await runUcxCall('host', [...sizes], () => {}, { wait, sharedMemory });
    results.push(...floor.results.map((r) => ({ ...r, workload: r.bytes === 0 ? 'unary_small_rtt' : 'tensor_arg_host' })));
    skipped.push(...floor.skipped);
  }
  for (const make of [() => gdrpcSystem(), () => gdrpcSystem(BUSY_POLL_US), () => gdrpcSystem('adaptive', { sharedMemory: true }), grpcSystem]) {
    const system = await make();
    try {
      results.push(await latency(system, system.name === 'grpc-js' ? LATENCY_CALLS / 4 : LATENCY_CALLS));
      results.push(await rate(system));
      await warmTensorPath(system);
      for (const bytes of TENSOR_SIZES) if (system.name !== `gdrpc-busypoll-${BUSY_POLL_US}us` || bytes <= MiB) results.push(await throughput(system, bytes));
      if (system.name !== `gdrpc-busypoll-${BUSY_POLL_US}us`) results.push(await rate(system, 4 * KiB));
      if (system.name === 'gdrpc') {
        // 'rma' only where the run opted in (GDRPC_UNSAFE_RMA=1, docs/security.md).
        for (const mover of unsafeRmaEnabled() ? ['inline', 'tag', 'rma'] as const : ['inline', 'tag'] as const) {
          for (const bytes of MOVER_SIZES) if (mover !== 'inline' || bytes <= MiB) results.push(await throughput(system, bytes, mover));
        }
      }
    } finally {
      await system.close();
    }
  }
  for (const result of results) {
    if (!result.system.startsWith('gdrpc')) continue;
    const peer = results.find((r) => r.system === 'grpc-js' && r.workload === result.workload && r.bytes === result.bytes);
    if (peer === undefined) continue;
    const ratio = (a: number | null, b: number | null): number | null => (a === null || b === null || b === 0 ? null : a / b);
    result.ratio_to_grpc_js = { p50_us: ratio(result.p50_us, peer.p50_us), p99_us: ratio(result.p99_us, peer.p99_us), ops_per_s: ratio(result.ops_per_s, peer.ops_per_s), gbps: ratio(result.gbps, peer.gbps) };
  }
  for (const r of results) {
    const figures = [r.p50_us !== null ? `p50 ${r.p50_us.toFixed(1)} us` : '', r.p99_us !== null ? `p99 ${r.p99_us.toFixed(1)} us` : '',
      r.ops_per_s !== null ? `${Math.round(r.ops_per_s)} /s` : '', r.gbps !== null ? `${r.gbps.toFixed(2)} GB/s` : ''].filter(Boolean).join('  ');
    console.log(`${r.system.padEnd(22)} ${r.workload.padEnd(34)} ${String(r.bytes).padStart(10)}  ${figures}`);
  }
  for (const s of skipped) console.log(`skipped ${s.system}: ${s.reason.split('\n')[0]}`);
  return { machine: describeMachine(), results, skipped };
}
