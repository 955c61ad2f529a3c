// `npm run bench -- poll [--rounds R] --json <file>`: the worker's polling after work (docs/binding.md
// "Polling after work") under each setting: off (sleep on the event fd at once), adaptive (the
// default) and a fixed 100 us window. Per setting: small-call round trip (p50, p99) with the CPU
// time both processes spent per call, calls/s with 64 in flight with the same, and the CPU both
// use over 2 s of idling after the load (an idle process must use none); then, with a new server
// process and a new client runtime, calls carrying a 4 KiB host tensor through the tag mover (a
// request, its payload and a reply: the window must open for them from a cold start too).
// Settings alternate round by round in one run, so the machine's drift hits all alike.
import { describeMachine, percentile } from './machine.ts';
import { gdrpcSystem, type System } from './rpc-gdrpc.ts';
import { CpuMeter, cpuSecondsOf } from './cpu-time.ts';
import { warmUp } from './warm.ts';

const SETTINGS: Array<number | 'adaptive'> = [0, 'adaptive', 100];
const CALLS = 10_000;
const IN_FLIGHT = 64;
const RATE_MS = 2000;
const IDLE_MS = 2000;
const TENSOR_BYTES = 4096;
const TENSOR_CALLS = 5000;

/** CPU µs per call of this process and of the peer while `work` made `calls()` calls. */
async function measured(system: System, work: () => Promise<number>): Promise<{ calls: number; wallMs: number; clientCpuUsPerCall: number; serverCpuUsPerCall: number }> {
  const meter = new CpuMeter(system.peerPid!);
  const t0 = performance.now();
  const calls = await work();
  const wallMs = performance.now() - t0;
  const { client_cpu_us, server_cpu_us } = meter.perCall(calls);
  // This bench is Linux's (it reads the peer's CPU from /proc): a missing figure is an error here.
  if (server_cpu_us === null) throw new Error(`no CPU time for the peer (pid ${system.peerPid}) in /proc`);
  return { calls, wallMs, clientCpuUsPerCall: client_cpu_us, serverCpuUsPerCall: server_cpu_us };
}

/** `calls` serial calls of `call`: each one's round trip in µs, sorted, and the CPU per call of
 *  both processes (measured). */
async function serialCalls(system: System, calls: number, call: () => Promise<void>): Promise<{ samples: number[]; serial: Awaited<ReturnType<typeof measured>> }> {
  const samples: number[] = [];
  const serial = await measured(system, async () => {
    for (let i = 0; i < calls; i += 1) {
      const t0 = process.hrtime.bigint();
      await call();
      samples.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
    return calls;
  });
  samples.sort((a, b) => a - b);
  return { samples, serial };
}

/** Serial calls carrying a TENSOR_BYTES host tensor (tag mover), with a new server process and a
 *  new client runtime. */
async function measureTensorCalls(setting: number | 'adaptive'): Promise<Record<string, number>> {
  const system = await gdrpcSystem(setting);
  try {
    const warmed = await warmUp(() => system.sink(TENSOR_BYTES, 'tag'), { minCalls: 3000 });
    const { samples, serial } = await serialCalls(system, TENSOR_CALLS, () => system.sink(TENSOR_BYTES, 'tag'));
    const w = system.workerStats?.() as Record<string, number> | undefined;
    return {
      bytes: TENSOR_BYTES, p50_us: percentile(samples, 50), p99_us: percentile(samples, 99), warm_calls: warmed.calls,
      client_cpu_us_per_call: serial.clientCpuUsPerCall, server_cpu_us_per_call: serial.serverCpuUsPerCall,
      client_window_us: w?.pollWindowUs ?? NaN,
    };
  } finally {
    await system.close();
  }
}

async function measureSetting(setting: number | 'adaptive'): Promise<Record<string, unknown>> {
  const system = await gdrpcSystem(setting);
  try {
    const warmed = await warmUp(() => system.ping());
    const { samples, serial } = await serialCalls(system, CALLS, () => system.ping());
    const until = performance.now() + RATE_MS;
    const loaded = await measured(system, async () => {
      let done = 0;
      await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
        while (performance.now() < until) { await system.ping(); done += 1; }
      }));
      return done;
    });
    // Idle: no call at all; both processes' CPU over the window, as a share of one core.
    const c0 = process.cpuUsage();
    const s0 = cpuSecondsOf(system.peerPid!);
    await new Promise((resolve) => setTimeout(resolve, IDLE_MS));
    const c = process.cpuUsage(c0);
    return {
      setting,
      small_rtt: { p50_us: percentile(samples, 50), p99_us: percentile(samples, 99), warm_calls: warmed.calls, client_cpu_us_per_call: serial.clientCpuUsPerCall, server_cpu_us_per_call: serial.serverCpuUsPerCall },
      in_flight_64: { calls_per_s: loaded.calls / (loaded.wallMs / 1000), client_cpu_us_per_call: loaded.clientCpuUsPerCall, server_cpu_us_per_call: loaded.serverCpuUsPerCall },
      idle_cores: { client: (c.user + c.system) / 1e3 / IDLE_MS, server: ((cpuSecondsOf(system.peerPid!) - s0) * 1e3) / IDLE_MS },
      client_worker: system.workerStats?.(),
    };
  } finally {
    await system.close();
  }
}

export async function runPollBench(opts: { json?: string; flags: string[] }): Promise<object> {
  const roundsAt = opts.flags.indexOf('--rounds');
  const rounds = roundsAt >= 0 ? Number(opts.flags[roundsAt + 1]) : 3;
  if (!Number.isInteger(rounds) || rounds < 1) throw new Error('--rounds takes a positive integer');
  const results: Array<Record<string, unknown>> = [];
  for (let round = 0; round < rounds; round += 1) {
    for (const setting of SETTINGS) {
      const r: Record<string, unknown> = { ...await measureSetting(setting), tensor_tag: await measureTensorCalls(setting) };
      results.push({ round, ...r });
      const small = r.small_rtt as Record<string, number>;
      const loaded = r.in_flight_64 as Record<string, number>;
      const idle = r.idle_cores as Record<string, number>;
      const w = r.client_worker as Record<string, number>;
      const t = r.tensor_tag as Record<string, number>;
      console.log(`round ${round}, busyPollUs ${setting}: small p50 ${small.p50_us!.toFixed(1)} us p99 ${small.p99_us!.toFixed(1)} us, cpu/call ${small.client_cpu_us_per_call!.toFixed(1)} + ${small.server_cpu_us_per_call!.toFixed(1)} us; `
        + `64 in flight ${Math.round(loaded.calls_per_s!)} calls/s, cpu/call ${loaded.client_cpu_us_per_call!.toFixed(1)} + ${loaded.server_cpu_us_per_call!.toFixed(1)} us; idle ${idle.client!.toFixed(3)} + ${idle.server!.toFixed(3)} cores; client spins ${w.pollSpins} (ran out ${w.pollMisses}, preempted ${w.pollPreempted}, not begun: no idle core ${w.pollBusyMachine}); `
        + `${t.bytes} B tensor calls p50 ${t.p50_us!.toFixed(1)} us p99 ${t.p99_us!.toFixed(1)} us, cpu/call ${t.client_cpu_us_per_call!.toFixed(1)} + ${t.server_cpu_us_per_call!.toFixed(1)} us, client window ${t.client_window_us!.toFixed(1)} us`);
    }
  }
  return {
    machine: describeMachine(),
    what: `gdrpc small calls between two processes under busyPollUs 0 (off), 'adaptive' (the default) and 100 us, alternating over ${rounds} rounds: round trip, CPU per call of client + server, calls/s with ${IN_FLIGHT} in flight, idle CPU over ${IDLE_MS} ms after; then, with a new server process and client runtime, ${TENSOR_CALLS} serial calls carrying a ${TENSOR_BYTES}-byte host tensor through the tag mover after warm-up calls until the path stopped getting faster (bench/warm.ts; warm_calls) (tensor_tag)`,
    results,
  };
}
