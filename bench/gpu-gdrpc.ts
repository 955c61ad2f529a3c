// gdrpc between two processes on the GPU: small-call round trip, and the per-call time of a
// CUDA tensor argument from 4 KiB to 1 GiB through each mover (one call in flight, so the
// numbers are latencies; throughput is size / per-call time).
import { fileURLToPath } from 'node:url';
import { callInfo, Client, type Device, type Tensor } from '../core/index.ts';
import { Runtime } from '../core/rpc/runtime/runtime.ts';
import { cuda } from '../core/cuda.ts';
import { SinkDescriptor } from './schemas/gen/gpu_sink.ts';
import { receivingOn } from '../test/support/receive-placement.ts';
import { percentile, type BenchResult } from './machine.ts';
import { unsafeRmaEnabled } from '../core/rpc/runtime/runtime.ts';
import { spawnPeer, type Peer } from '../test/support/peer.ts';
import { CpuMeter } from './cpu-time.ts';
import { warmUp, type Warmed } from './warm.ts';

export interface GdrpcOptions {
  client: Device; server: Device; sizes: number[]; system: string; smallCalls: number;
  /** Both processes on shared memory (RuntimeOptions.sharedMemory: trusted peers). */
  sharedMemory?: boolean;
  /** The many-in-flight rows too (default true). */
  inFlight?: boolean;
}

function row(system: string, workload: string, bytes: number, samples: number[], extra: Record<string, unknown> = {}): BenchResult {
  const sorted = [...samples].sort((a, b) => a - b);
  const mean = sorted.reduce((a, b) => a + b, 0) / sorted.length;
  const p50 = percentile(sorted, 50);
  return {
    system, workload, bytes, p50_us: p50, p99_us: percentile(sorted, 99), ops_per_s: 1e6 / mean,
    gbps: bytes > 0 ? bytes / p50 / 1e3 : null, iterations: sorted.length, ...extra,
  };
}

/** Iterations per size: about 16 GiB moved, between 20 and 3000 calls. */
export function itersFor(size: number): number {
  return Math.max(20, Math.min(3000, Math.round((16 * 2 ** 30) / Math.max(size, 1))));
}

function startPeer(device: Device, poolBytes: number, sharedMemory: boolean): Promise<Peer<{ port: number }>> {
  const file = fileURLToPath(new URL('./gpu-peer.ts', import.meta.url));
  // The peer's default runtime takes its choice from the environment: set either way, so that a
  // default row is never run over shared memory by an inherited variable.
  return spawnPeer(file, { args: [device, String(poolBytes)], env: { UCX_MM_ERROR_HANDLING: sharedMemory ? 'y' : 'n' } });
}

async function timeCalls(iters: number, call: () => Promise<unknown>): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < iters; i += 1) {
    const started = process.hrtime.bigint();
    await call();
    samples.push(Number(process.hrtime.bigint() - started) / 1e3);
  }
  return samples;
}

/** timeCalls, with the CPU µs per call of both processes (`peer`: the server's pid), as the C
 *  rows report theirs. */
async function timeCallsWithCpu(iters: number, peer: number, call: () => Promise<unknown>): Promise<{ samples: number[]; cpu: ReturnType<CpuMeter['perCall']> }> {
  const meter = new CpuMeter(peer);
  const samples = await timeCalls(iters, call);
  return { samples, cpu: meter.perCall(iters) };
}

const cpuText = (cpu: ReturnType<CpuMeter['perCall']>): string => `, cpu/call ${cpu.client_cpu_us.toFixed(1)} + ${cpu.server_cpu_us?.toFixed(1) ?? '?'} us`;

/** Sizes and depths of the many-in-flight rows (issue 11, item 4). */
const IN_FLIGHT_SIZES = [1 << 20, 16 << 20];
const IN_FLIGHT_DEPTHS = [16, 64];
const IN_FLIGHT_SECONDS = 1;

/** Many tag calls in flight at once, each lane sending its own tensor over and over for about a
 *  second: the aggregate rate (bytes of every call completed over the elapsed time) and the
 *  per-call time under that load. Rows whose tensors do not fit both pools are left out. */
async function manyInFlight(client: Client, service: ReturnType<typeof receivingOn<typeof SinkDescriptor>>, pool: ReturnType<Runtime['createPool']>,
  options: GdrpcOptions, poolBytes: number, peer: number, log: (line: string) => void): Promise<BenchResult[]> {
  const rows: BenchResult[] = [];
  for (const size of IN_FLIGHT_SIZES.filter((bytes) => options.sizes.includes(bytes))) {
    for (const depth of IN_FLIGHT_DEPTHS) {
      if (size * depth > poolBytes - (1 << 20)) continue;
      const tensors = Array.from({ length: depth }, () => pool.allocate([size], 'u8'));
      try {
        for (const x of tensors) if (options.client !== 'cpu') cuda.memset(x.address, 0x5a, size);
        const sink = (x: Tensor): Promise<unknown> => client.unary(service.methods.sink, { x }, { mover: 'tag' });
        await Promise.all(tensors.map((x) => sink(x)));
        const samples: number[] = [];
        const meter = new CpuMeter(peer);
        const started = process.hrtime.bigint();
        const until = performance.now() + IN_FLIGHT_SECONDS * 1000;
        await Promise.all(tensors.map(async (x) => {
          while (performance.now() < until) {
            const t0 = process.hrtime.bigint();
            await sink(x);
            samples.push(Number(process.hrtime.bigint() - t0) / 1e3);
          }
        }));
        const elapsedUs = Number(process.hrtime.bigint() - started) / 1e3;
        const cpu = meter.perCall(samples.length);
        const r = row(options.system, `in_flight_${depth}/tag`, size, samples, { mover: 'tag', in_flight: depth, client: options.client, server: options.server, ...cpu });
        // Aggregate, not per call: every completed call's bytes over the whole elapsed time.
        r.gbps = (samples.length * size) / elapsedUs / 1e3;
        r.ops_per_s = samples.length / (elapsedUs / 1e6);
        rows.push(r);
        log(`${options.system}: ${depth} x ${size} B in flight: ${r.gbps.toFixed(1)} GB/s aggregate, ${Math.round(r.ops_per_s)} calls/s, p50 ${r.p50_us!.toFixed(1)} us per call${cpuText(cpu)}`);
      } finally {
        for (const x of tensors) x.release();
      }
    }
  }
  return rows;
}

/** Warms the tensor path until it runs compiled code in both processes (bench/warm.ts), with the
 *  smallest size, so that the first size timed is not the one that pays for it. On the 2-core box
 *  (fixed polling window, one run), 64 KiB host-tensor calls took 461 µs p50 over the first 250,
 *  151-259 µs over each 250 up to the 1,500th and 64-66 µs from the 2,500th. */
async function warmTensorPath(pool: ReturnType<Runtime['createPool']>, options: GdrpcOptions, sink: (x: Tensor) => Promise<unknown>): Promise<Warmed> {
  const size = Math.min(...options.sizes);
  const x = pool.allocate([size], 'u8');
  try {
    if (options.client !== 'cpu') cuda.memset(x.address, 0x5a, size);
    return await warmUp(() => sink(x), { minCalls: 3000 });
  } finally {
    x.release();
  }
}

const warmText = (w: Warmed): string => `, warmed ${w.calls} calls (window p50 ${w.firstP50Us.toFixed(1)} -> ${w.lastP50Us.toFixed(1)} us)`;
const warmFields = (w: Warmed): Record<string, number> => ({ warm_calls: w.calls, warm_first_p50_us: w.firstP50Us, warm_last_p50_us: w.lastP50Us });

/** Runs the gdrpc workloads; the peer and the pools are gone when it returns, whatever happened. */
export async function runGdrpc(options: GdrpcOptions, log: (line: string) => void): Promise<BenchResult[]> {
  const maxSize = Math.max(...options.sizes);
  const poolBytes = maxSize + (1 << 20);
  const sharedMemory = options.sharedMemory === true;
  const peer = await startPeer(options.server, poolBytes, sharedMemory);
  // The client's own runtime, so that the pool it sends from is mapped on the client's context.
  const runtime = Runtime.create({ sharedMemory });
  const pool = runtime.createPool({ device: options.client, bytes: poolBytes });
  const service = receivingOn(SinkDescriptor, options.client);
  const results: BenchResult[] = [];
  let client: Client | undefined;
  try {
    client = await Client.connect({ host: '127.0.0.1', port: peer.ready.port }, { poolBytes: 0, runtime });
    const c = client;
    const ping = (): Promise<unknown> => c.unary(service.methods.ping, { n: 1 });
    const warmed = await warmUp(ping);
    const small = await timeCallsWithCpu(options.smallCalls, peer.pid, ping);
    results.push(row(options.system, 'small_call_rtt', 0, small.samples, { ...small.cpu, ...warmFields(warmed) }));
    log(`${options.system}: small call p50 ${results.at(-1)!.p50_us!.toFixed(1)} us${cpuText(small.cpu)}${warmText(warmed)}`);
    for (const mover of unsafeRmaEnabled() ? ['tag', 'rma'] as const : ['tag'] as const) {
      const warmedPath = await warmTensorPath(pool, options, (x) => c.unary(service.methods.sink, { x }, { mover }));
      log(`${options.system}: ${mover} path${warmText(warmedPath)}`);
      for (const size of options.sizes) {
        const x: Tensor = pool.allocate([size], 'u8');
        try {
          if (options.client !== 'cpu') {
            cuda.memset(x.address, 0x5a, size);  // synchronous: contents in place before any send
          }
          const sink = (): Promise<Record<string, unknown>> => c.unary(service.methods.sink, { x }, { mover });
          const iters = itersFor(size);
          await timeCalls(Math.max(3, Math.round(iters / 10)), sink);
          const transfer = callInfo(await sink())?.transfers[0];
          const path = transfer?.path ?? 'unknown';
          const { samples, cpu } = await timeCallsWithCpu(iters, peer.pid, sink);
          // UCX's own description of the send (which protocol, which lanes), where it gave one.
          const protocol = transfer?.protocol;
          results.push(row(options.system, `tensor_arg/${mover}`, size, samples, { mover, path, ...(protocol !== undefined ? { protocol } : {}), client: options.client, server: options.server, ...cpu }));
          const r = results.at(-1)!;
          log(`${options.system}: ${mover} ${size} B p50 ${r.p50_us!.toFixed(1)} us ${r.gbps!.toFixed(1)} GB/s via ${path}${cpuText(cpu)}`);
        } finally {
          x.release();
        }
      }
    }
    if (options.inFlight !== false) results.push(...await manyInFlight(c, service, pool, options, poolBytes, peer.pid, log));
  } finally {
    await client?.close();
    pool.close({ force: true });
    await runtime.close();
    await peer.dispose();
  }
  return results;
}
