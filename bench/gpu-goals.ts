// The GPU issue's goals, checked against one run's rows, each with the measured value and, where
// it is missed, what the time goes to (the part of a call that is not the wire at ucx_perftest's
// bandwidth, i.e. the framework's own cost per call).
import type { BenchResult } from './machine.ts';
import { ucxCallSystem } from './ucx-call.ts';

export interface Goal { goal: string; target: string; measured: string; met: boolean | null; note: string }

const MiB = 2 ** 20;

/** The first row of `system` at `bytes`. */
function rowOf(rows: BenchResult[], system: string, bytes: number): BenchResult | undefined {
  return rows.find((r) => r.system === system && r.bytes === bytes);
}

function best(rows: BenchResult[], system: string, bytes: number): BenchResult | undefined {
  return rows.filter((r) => r.system === system && r.workload.startsWith('tensor_arg/') && r.bytes === bytes && r.p50_us !== null)
    .sort((a, b) => a.p50_us! - b.p50_us!)[0];
}

/** How a small call compares with ucx_perftest's 8-byte round trip. That message is in CUDA memory
 *  (`-m cuda,cuda`), which UCX looks up on every message; gdrpc's small call carries no tensor, so
 *  on some machines it is the faster of the two. */
export function smallCallNote(callUs: number, perftestUs: number): string {
  const gap = callUs - perftestUs;
  const rtt = `ucx_perftest tag round trip (8 B, CUDA memory) is ${perftestUs.toFixed(1)} us`;
  return gap >= 0
    ? `${rtt}; gdrpc adds ${gap.toFixed(1)} us (msgpack frames both ways, dispatch, handler, event-loop wake-ups)`
    : `${rtt}; gdrpc's call, which carries no tensor, takes ${(-gap).toFixed(1)} us less`;
}

/** Goals of issue 5 for the rows of `system` (gdrpc on one GPU). */
export function checkGoals(rows: BenchResult[], system: string): Goal[] {
  const goals: Goal[] = [];
  const perf = (bytes: number): BenchResult | undefined => rows.find((r) => r.system === 'ucx_perftest' && r.workload === 'tag_bw' && r.bytes === bytes);
  const perfRtt = rows.find((r) => r.system === 'ucx_perftest' && r.workload === 'tag_rtt');
  const floor = (system: string, bytes: number): BenchResult | undefined => rowOf(rows, system, bytes);
  /** What the same call takes in C over UCX (bench/ucx-call.c), spinning and with the server asleep between calls. */
  const floorNote = (bytes: number): string => {
    const spin = floor(ucxCallSystem('none'), bytes);
    const sleeps = floor(ucxCallSystem('server'), bytes);
    if (!spin && !sleeps) return '';
    const parts = [spin && `${spin.p50_us!.toFixed(1)} us with busy-polling workers`,
      sleeps && `${sleeps.p50_us!.toFixed(1)} us with the server asleep on its worker's fd between calls, as an idle gdrpc server is`];
    return `; the same call in C over UCX (bench/ucx-call.c) takes ${parts.filter(Boolean).join(', ')}`;
  };

  const small = rows.find((r) => r.system === system && r.workload === 'small_call_rtt');
  goals.push({
    goal: 'small call round trip p50', target: '<= 20 us',
    measured: small ? `${small.p50_us!.toFixed(1)} us` : 'not measured',
    met: small ? small.p50_us! <= 20 : null,
    note: (small && perfRtt ? smallCallNote(small.p50_us!, perfRtt.p50_us!) : 'no ucx_perftest latency to compare') + floorNote(0),
  });

  const mid = best(rows, system, 16 * MiB);
  const midPerf = perf(16 * MiB);
  goals.push({
    goal: 'per-call time with a 16 MiB CUDA argument (best mover), p50', target: '<= 50 us',
    measured: mid ? `${mid.p50_us!.toFixed(1)} us (${mid.mover as string})` : 'not measured',
    met: mid ? mid.p50_us! <= 50 : null,
    note: (mid && midPerf?.gbps ? overhead(mid, midPerf.gbps) : 'no ucx_perftest bandwidth at 16 MiB to compare') + floorNote(16 * MiB),
  });

  const big = best(rows, system, 1024 * MiB);
  goals.push({
    goal: '1 GiB CUDA argument throughput (best mover)', target: '>= 1500 GB/s (bytes moved / p50 time)',
    measured: big ? `${big.gbps!.toFixed(1)} GB/s (${big.mover as string})` : 'not measured',
    met: big ? big.gbps! >= 1500 : null,
    note: (big && perf(1024 * MiB)?.gbps ? overhead(big, perf(1024 * MiB)!.gbps!) : 'no ucx_perftest bandwidth at 1 GiB to compare') + floorNote(1024 * MiB),
  });

  const sizes = [...new Set(rows.filter((r) => r.system === system && r.bytes >= 16 * MiB).map((r) => r.bytes))].sort((a, b) => a - b);
  const ratios = sizes.flatMap((bytes) => {
    const ours = best(rows, system, bytes);
    const theirs = perf(bytes);
    return ours?.gbps && theirs?.gbps ? [{ bytes, ratio: ours.gbps / theirs.gbps }] : [];
  });
  goals.push({
    goal: 'throughput vs ucx_perftest tag_bw from 16 MiB up', target: '>= 90% at every size',
    measured: ratios.length ? ratios.map((r) => `${r.bytes / MiB} MiB: ${(r.ratio * 100).toFixed(0)}%`).join(', ') : 'not measured',
    met: ratios.length ? ratios.every((r) => r.ratio >= 0.9) : null,
    note: 'gdrpc is measured one call at a time (latency-bound); ucx_perftest tag_bw streams many messages in flight',
  });
  goals.push(...sharedMemoryGoals(rows, `${system} (shared memory)`));
  return goals;
}

/** The small-call and 16 MiB goals for trusted peers over shared memory (the GPU bench's gdrpc-shm
 *  step), each beside the same call in C over shared memory; none when the step did not run. */
function sharedMemoryGoals(rows: BenchResult[], system: string): Goal[] {
  const ours = (bytes: number): BenchResult | undefined => rows.find((r) => r.system === system && r.bytes === bytes && r.p50_us !== null);
  const inC = (bytes: number): BenchResult | undefined => rowOf(rows, ucxCallSystem('none', 'listener', true), bytes);
  const cNote = (bytes: number): string => {
    const c = inC(bytes);
    return c ? `the same call in C over UCX's shared memory takes ${c.p50_us!.toFixed(1)} us` : 'no C call over shared memory to compare';
  };
  const small = ours(0);
  if (small === undefined) return [];
  const goals: Goal[] = [{
    goal: 'small call round trip p50, trusted peers over shared memory (RuntimeOptions.sharedMemory)', target: '<= 20 us',
    measured: `${small.p50_us!.toFixed(1)} us`, met: small.p50_us! <= 20, note: cNote(0),
  }];
  const mid = ours(16 * MiB);
  if (mid !== undefined) {
    const copy = rows.find((r) => r.system === 'cuda-copy (torch)' && r.bytes === 16 * MiB && r.p50_us !== null);
    goals.push({
      goal: 'per-call time with a 16 MiB CUDA argument over shared memory, p50', target: copy ? `<= ${(copy.p50_us! + 30).toFixed(1)} us (torch's copy + 30 us)` : "<= torch's copy + 30 us",
      measured: `${mid.p50_us!.toFixed(1)} us`, met: copy ? mid.p50_us! <= copy.p50_us! + 30 : null,
      note: copy ? cNote(16 * MiB) : `no torch copy at 16 MiB in this run; ${cNote(16 * MiB)}`,
    });
  }
  return goals;
}

function overhead(row: BenchResult, perfGbps: number): string {
  const wireUs = row.bytes / perfGbps / 1e3;
  const rest = row.p50_us! - wireUs;
  if (rest <= 0) return `faster than the bytes take at ucx_perftest's streaming ${perfGbps.toFixed(1)} GB/s (${wireUs.toFixed(1)} us)`;
  return `at ucx_perftest's ${perfGbps.toFixed(1)} GB/s the bytes need ${wireUs.toFixed(1)} us; the remaining ` +
    `${rest.toFixed(1)} us per call are the request/response frames, rendezvous handshake and handler dispatch`;
}
