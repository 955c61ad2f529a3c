// The GPU bench's goal notes (bench/gpu-goals.ts): a small call against ucx_perftest's round trip,
// and the C floor (bench/ucx-call.c) beside the goals it bounds.
import { describe, expect, it } from 'vitest';
import { checkGoals, smallCallNote } from '../../bench/gpu-goals.ts';
import type { BenchResult } from '../../bench/machine.ts';
import { ucxCallSystem } from '../../bench/ucx-call.ts';

describe('smallCallNote', () => {
  it('says what gdrpc adds when its call is the slower', () => {
    expect(smallCallNote(95.5, 20.25)).toBe('ucx_perftest tag round trip (8 B, CUDA memory) is 20.3 us; gdrpc adds 75.3 us (msgpack frames both ways, dispatch, handler, event-loop wake-ups)');
  });

  it('says how much less it takes when the call is the faster (no negative "adds")', () => {
    const note = smallCallNote(41.1, 542.9);
    expect(note).toBe("ucx_perftest tag round trip (8 B, CUDA memory) is 542.9 us; gdrpc's call, which carries no tensor, takes 501.8 us less");
    expect(note).not.toContain('-');
  });
});

describe('checkGoals with the C floor', () => {
  const row = (system: string, workload: string, bytes: number, p50: number): BenchResult =>
    ({ system, workload, bytes, p50_us: p50, p99_us: null, ops_per_s: null, gbps: bytes ? bytes / p50 / 1e3 : null, mover: 'tag' });

  it('names what the same call takes in C beside the small-call and 16 MiB goals', () => {
    const goals = checkGoals([
      row('gdrpc', 'small_call_rtt', 0, 57.5),
      row('gdrpc', 'tensor_arg/tag', 16 * 2 ** 20, 105.3),
      row('ucx_perftest', 'tag_rtt', 8, 696.4),
      row(ucxCallSystem('none'), 'small_call_rtt', 0, 16.88),
      row(ucxCallSystem('server'), 'small_call_rtt', 0, 29.47),
      row(ucxCallSystem('none'), 'tensor_arg/tag', 16 * 2 ** 20, 63.19),
    ], 'gdrpc');
    expect(goals[0]!.note).toMatch(/; the same call in C over UCX \(bench\/ucx-call\.c\) takes 16\.9 us with busy-polling workers, 29\.5 us with the server asleep on its worker's fd between calls, as an idle gdrpc server is$/);
    expect(goals[1]!.note).toMatch(/\(bench\/ucx-call\.c\) takes 63\.2 us with busy-polling workers$/);
    // No C row at 1 GiB in these rows: the 1 GiB note says nothing of it.
    expect(goals[2]!.note).not.toContain('ucx-call');
  });

  it('names the C call beside the 1 GiB goal when there is one', () => {
    const goals = checkGoals([
      row('gdrpc', 'tensor_arg/tag', 2 ** 30, 740.9),
      row('ucx_perftest', 'tag_bw', 2 ** 30, 762.9),
      row(ucxCallSystem('none'), 'tensor_arg/tag', 2 ** 30, 582.13),
    ], 'gdrpc');
    expect(goals[2]!.goal).toBe('1 GiB CUDA argument throughput (best mover)');
    expect(goals[2]!.note).toMatch(/; the same call in C over UCX \(bench\/ucx-call\.c\) takes 582\.1 us with busy-polling workers$/);
  });

  it('adds the shared-memory goals when the gdrpc-shm step ran, each beside C over shared memory and the copy', () => {
    const shm = 'gdrpc (shared memory)';
    const goals = checkGoals([
      row('gdrpc', 'small_call_rtt', 0, 58.9),
      row(shm, 'small_call_rtt', 0, 28.2),
      row(shm, 'tensor_arg/tag', 16 * 2 ** 20, 92.8),
      row('cuda-copy (torch)', 'd2d_copy/cuda:0->cuda:0', 16 * 2 ** 20, 8.5),
      row(ucxCallSystem('none', 'listener', true), 'small_call_rtt', 0, 6.4),
      row(ucxCallSystem('none', 'listener', true), 'tensor_arg/tag', 16 * 2 ** 20, 25.2),
    ], 'gdrpc');
    const [small, mid] = goals.slice(-2);
    expect(small).toMatchObject({ target: '<= 20 us', measured: '28.2 us', met: false, note: "the same call in C over UCX's shared memory takes 6.4 us" });
    expect(mid).toMatchObject({ target: "<= 38.5 us (torch's copy + 30 us)", measured: '92.8 us', met: false, note: "the same call in C over UCX's shared memory takes 25.2 us" });
    // Without the step, no such goal.
    expect(checkGoals([row('gdrpc', 'small_call_rtt', 0, 58.9)], 'gdrpc').some((g) => g.goal.includes('shared memory'))).toBe(false);
  });

  it('adds nothing when the C program did not run', () => {
    const goals = checkGoals([row('gdrpc', 'small_call_rtt', 0, 57.5), row('ucx_perftest', 'tag_rtt', 8, 696.4)], 'gdrpc');
    expect(goals[0]!.note).not.toContain('ucx-call');
    expect(goals[0]!.note).toBe(smallCallNote(57.5, 696.4));
  });
});
