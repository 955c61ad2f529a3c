// `npm run bench -- warm-curve [--device cpu|cuda:N] [--windows N]`: a fresh pair of processes
// (the GPU bench's server, bench/gpu-peer.ts, and a client on a runtime of its own) making small
// calls one at a time: the p50 of each window of 1,000 calls from the first call on, and each
// thread's CPU per call in both processes over the second half. It shows how many calls a fresh
// process takes before its call path runs compiled code (bench/warm.ts), and whether a call's CPU
// goes anywhere but the main thread.
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Client } from '../core/index.ts';
import { cuda } from '../core/cuda.ts';
import { Runtime } from '../core/rpc/runtime/runtime.ts';
import { isDevice, type Device } from '../core/tensor/device.ts';
import { SinkDescriptor } from './schemas/gen/gpu_sink.ts';
import { receivingOn } from '../test/support/receive-placement.ts';
import { spawnPeer } from '../test/support/peer.ts';
import { describeMachine, positiveFlag } from './machine.ts';

const WINDOW = 1000;
const POOL_BYTES = 64 << 20;

/** CPU clock ticks (10 ms) of every thread of `pid`, by "name#tid" (Linux /proc). */
function threadTicks(pid: number | 'self'): Map<string, number> {
  const ticks = new Map<string, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    } catch {
      continue;  // the thread ended meanwhile
    }
    const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    ticks.set(`${name}#${tid}`, Number(fields[11]) + Number(fields[12]));
  }
  return ticks;
}

/** µs of CPU per call of each thread that used any between `before` and `after`. */
function perCall(before: Map<string, number>, after: Map<string, number>, calls: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [thread, t] of after) {
    const used = t - (before.get(thread) ?? 0);
    if (used > 0) out[thread] = (used * 10_000) / calls;
  }
  return out;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[sorted.length >> 1]!;
}

export async function runWarmCurveBench(opts: { flags: string[] }): Promise<object> {
  const deviceAt = opts.flags.indexOf('--device');
  const device = (deviceAt >= 0 ? opts.flags[deviceAt + 1] : 'cpu') as Device;
  if (!isDevice(device)) throw new Error(`--device takes cpu or cuda:N, not ${String(device)}`);
  if (device !== 'cpu' && !(cuda.available() && Number(device.slice(5)) < cuda.deviceCount())) {
    throw new Error(`warm-curve: no ${device} here (${cuda.available() ? `${cuda.deviceCount()} CUDA devices` : cuda.unavailableReason()})`);
  }
  const windows = positiveFlag(opts.flags, '--windows', 24);
  const peer = await spawnPeer<{ port: number }>(fileURLToPath(new URL('./gpu-peer.ts', import.meta.url)), {
    args: [device, String(POOL_BYTES)], env: { UCX_MM_ERROR_HANDLING: 'n' },
  });
  const runtime = Runtime.create({});
  const service = receivingOn(SinkDescriptor, device);
  try {
    const client = await Client.connect({ host: '127.0.0.1', port: peer.ready.port }, { poolBytes: 0, runtime });
    const ping = (): Promise<unknown> => client.unary(service.methods.ping, { n: 1 });
    const p50s: number[] = [];
    const times = new Array<number>(WINDOW);
    const from = Math.floor(windows / 2);
    let client0 = new Map<string, number>();
    let server0 = new Map<string, number>();
    for (let w = 0; w < windows; w += 1) {
      if (w === from) {
        client0 = threadTicks('self');
        server0 = threadTicks(peer.pid);
      }
      for (let i = 0; i < WINDOW; i += 1) {
        const t0 = process.hrtime.bigint();
        await ping();
        times[i] = Number(process.hrtime.bigint() - t0) / 1e3;
      }
      p50s.push(median(times));
    }
    const calls = (windows - from) * WINDOW;
    const cpu = { client: perCall(client0, threadTicks('self'), calls), server: perCall(server0, threadTicks(peer.pid), calls) };
    await client.close();
    console.log(`window p50s (us, ${WINDOW} calls each): ${p50s.map((p) => p.toFixed(1)).join(' ')}`);
    for (const [who, threads] of Object.entries(cpu)) {
      console.log(`${who} CPU per call after the ${from * WINDOW}th call (us): ${Object.entries(threads).map(([t, us]) => `${t} ${us.toFixed(1)}`).join(', ')}`);
    }
    return {
      machine: describeMachine(),
      what: `small calls one at a time between two fresh processes on ${device} (bench/gpu-peer.ts as server): p50 of each window of ${WINDOW} calls from the first; CPU per call of each thread of both processes over windows ${from} to ${windows - 1} (/proc, 10 ms ticks)`,
      device, window_calls: WINDOW, window_p50_us: p50s, cpu_us_per_call_by_thread: cpu,
    };
  } finally {
    await runtime.close();
    await peer.end(5000);
  }
}
