// `npm run bench -- gpu --json <file>`: CUDA tensors through gdrpc between two processes, beside
// ucx_perftest with CUDA memory, PyTorch RPC (TensorPipe) and a raw device-to-device copy, with
// the goals checked. GDRPC_GPU_DRYRUN=1 runs the same harness on host memory.
import { cuda } from '../core/cuda.ts';
import { UCX_DEFAULTS } from '../core/native.ts';
import type { Device } from '../core/tensor/index.ts';
import { runPerftest, runPython, type Skipped } from './gpu-external.ts';
import { checkGoals } from './gpu-goals.ts';
import { itersFor, runGdrpc } from './gpu-gdrpc.ts';
import { describeMachine, type BenchResult } from './machine.ts';
import { runUcxCall } from './ucx-call.ts';

const KiB = 1024;
const MiB = 1024 * KiB;
const GiB = 1024 * MiB;
/** Powers of 4 from 4 KiB to 1 GiB (16 MiB falls on it). */
const SIZES = [4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, GiB];

function gpus(): number {
  try {
    return cuda.available() ? cuda.deviceCount() : 0;
  } catch {
    return 0;
  }
}

/** Runs every GPU workload; baselines that cannot run are listed under `skipped` with the reason. */
export async function runGpuBench(_opts: { json?: string }): Promise<object> {
  const dryRun = process.env.GDRPC_GPU_DRYRUN === '1';
  const maxBytes = Number(process.env.GDRPC_GPU_MAX_BYTES ?? (dryRun ? 64 * MiB : GiB));
  const sizes = SIZES.filter((size) => size <= maxBytes);
  const count = dryRun ? 0 : gpus();
  const log = (line: string): void => console.log(line);
  const results: BenchResult[] = [];
  const skipped: Skipped[] = [];
  if (!dryRun && count === 0) {
    skipped.push({ system: 'all', reason: `no CUDA device (${cuda.available() ? 'deviceCount() is 0' : cuda.unavailableReason()}); set GDRPC_GPU_DRYRUN=1 for a host-memory dry run` });
    return { machine: describeMachine(), results, goals: [], skipped };
  }
  const device: Device = dryRun ? 'cpu' : 'cuda:0';
  const system = dryRun ? 'gdrpc (host dry run)' : 'gdrpc';
  const smallCalls = Number(process.env.GDRPC_BENCH_SMALL_CALLS ?? 5000);

  // GDRPC_GPU_BENCH_STEPS: a comma-separated list of the steps to run (gdrpc, ucx-call,
  // ucx_perftest, pytorch-rpc, cuda-copy); the others are listed as skipped.
  const only = process.env.GDRPC_GPU_BENCH_STEPS?.split(',').map((name) => name.trim()).filter(Boolean);
  const step = async (name: string, fn: () => Promise<void>): Promise<void> => {
    if (only !== undefined && !only.includes(name.split(' ')[0]!)) {
      skipped.push({ system: name, reason: `not in GDRPC_GPU_BENCH_STEPS (${only.join(',')})` });
      return;
    }
    const started = Date.now();
    try {
      await fn();
    } catch (error) {
      skipped.push({ system: name, reason: `failed: ${(error as Error).stack ?? String(error)}`.slice(0, 1500) });
    }
    log(`-- ${name}: ${((Date.now() - started) / 1000).toFixed(1)} s`);
  };

  await step('gdrpc', async () => { results.push(...await runGdrpc({ client: device, server: device, sizes, system, smallCalls }, log)); });
  // Trusted peers (RuntimeOptions.sharedMemory): control messages over shared memory instead of TCP
  // loopback, for the small call and the sizes from 1 MiB to 16 MiB.
  await step('gdrpc-shm', async () => {
    const shmSizes = sizes.filter((size) => size >= MiB && size <= 16 * MiB);
    results.push(...await runGdrpc({ client: device, server: device, sizes: shmSizes, system: `${system} (shared memory)`, smallCalls, sharedMemory: true, inFlight: false }, log));
  });
  if (count >= 2) {
    await step('gdrpc cuda:0->cuda:1', async () => {
      results.push(...await runGdrpc({ client: 'cuda:0', server: 'cuda:1', sizes, system: 'gdrpc (cuda:0 -> cuda:1)', smallCalls: 1000 }, log));
    });
  }
  await step('ucx-call', async () => {
    // Spinning over the sizes, and with the server asleep between calls (as an idle gdrpc server is) for a few.
    // And endpoints made from worker addresses, as the first runs of the program were, at two sizes.
    const variants = [
      { wait: 'none', connect: 'listener', sharedMemory: false, floorSizes: [0, 4 * KiB, 64 * KiB, MiB, 16 * MiB, 256 * MiB, GiB] },
      { wait: 'server', connect: 'listener', sharedMemory: false, floorSizes: [0, 4 * KiB, MiB] },
      { wait: 'none', connect: 'address', sharedMemory: false, floorSizes: [16 * MiB, GiB] },
      { wait: 'none', connect: 'listener', sharedMemory: true, floorSizes: [0, MiB, 16 * MiB] },
    ] as const;
    for (const { wait, connect, sharedMemory, floorSizes } of variants) {
      const floor = await runUcxCall(dryRun ? 'host' : 'cuda', floorSizes.filter((size) => size <= maxBytes), log, { wait, connect, sharedMemory });
      results.push(...floor.results);
      skipped.push(...floor.skipped);
    }
  });
  await step('ucx_perftest', async () => {
    const perf = await runPerftest(dryRun ? 'host' : 'cuda', sizes, itersFor, log);
    results.push(...perf.results);
    skipped.push(...perf.skipped);
  });
  const torchSizes = [16 * MiB, GiB].filter((size) => size <= maxBytes).join(',');
  await step('pytorch-rpc', async () => {
    const torch = await runPython('torch_rpc_bench.py', ['--device', dryRun ? 'cpu' : 'cuda', '--sizes', torchSizes], 'pytorch-rpc-tensorpipe', 300_000, log);
    results.push(...torch.results);
    skipped.push(...torch.skipped);
  });
  if (!dryRun) {
    await step('cuda-copy', async () => {
      const copy = await runPython('gpu_copy_bench.py', ['--sizes', [16 * MiB, 256 * MiB, GiB].join(','), ...(count >= 2 ? ['--peer'] : [])], 'cuda-copy', 120_000, log);
      results.push(...copy.results);
      skipped.push(...copy.skipped);
    });
  } else {
    skipped.push({ system: 'cuda-copy', reason: 'host dry run' });
  }

  const goals = checkGoals(results, system);
  for (const goal of goals) log(`goal ${goal.met === null ? '?' : goal.met ? 'met ' : 'MISSED'}: ${goal.goal}: ${goal.measured} (target ${goal.target}); ${goal.note}`);
  for (const s of skipped) log(`skipped ${s.system}: ${s.reason.split('\n')[0]}`);
  return {
    machine: { ...describeMachine(), cudaDevices: count },
    config: {
      dryRun, sizes, ucxDefaults: UCX_DEFAULTS,
      ucxEnv: Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith('UCX_'))),
      gdrpcEnv: Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith('GDRPC_'))),
    },
    results, goals, skipped,
    notes: [
      'gdrpc rows: one call in flight; p50/p99 are per-call times; gbps = bytes / p50 (payload bytes, counted once).',
      'ucx_perftest rows: tag_rtt doubles tag_lat (half round trip); tag_bw streams messages (window of outstanding sends); -e (PEER error mode) like gdrpc; same UCX_* environment.',
      'ucx-call rows: bench/ucx-call.c, the call\'s wire steps in C over the same UCX and settings, with busy-polling workers or with the server asleep on its worker\'s fd between calls, buffers from ucp_mem_map, the client connected through the server\'s listener (rows marked \'worker address\': endpoints made from worker addresses) (64-byte REQUEST, the payload, 64-byte RESPONSE; the client synchronizes its device first when there is a payload); receive_p50_us is the server\'s payload receive, posted after the REQUEST, until it completes.',
      'cuda-copy gbps counts bytes copied (size / time); read_plus_write_gbps counts read and write (2x).',
    ],
  };
}
