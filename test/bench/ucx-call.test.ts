// bench/ucx-call.c, the C floor the benchmarks run beside gdrpc: its lines parse into rows, and the
// program itself builds against the project's UCX and runs a host-memory call here.
import { afterAll, describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ucxHome } from '../../bench/perftest.ts';
import { run } from '../../bench/process.ts';
import { parseUcxCall, removeUcxCallProgram, runUcxCall, ucxCallProgram, ucxCallSystem } from '../../bench/ucx-call.ts';

// Vitest's workers may end without an exit event: the program's folder goes here.
afterAll(removeUcxCallProgram);

describe('parseUcxCall', () => {
  it('reads the small call and payload rows, with the receive step where there is a payload', () => {
    const rows = parseUcxCall([
      '# ucx-call cuda: two processes, busy-polling workers, buffers from ucp_mem_map',
      'cuda          0 bytes: call p50    24.17 us p99    29.07 | cpu per round client 24.50 us server 24.25 us (5000 rounds)',
      'cuda    1048576 bytes: call p50    58.85 us p99    73.92 | server receive step p50    26.32 us p99    34.03 | cpu per round client 59.00 us server 58.75 us (5000 rounds)',
      'a stray UCX log line',
    ].join('\n'), 'cuda');
    expect(rows).toEqual([
      { system: ucxCallSystem('none'), workload: 'small_call_rtt', bytes: 0, p50_us: 24.17, p99_us: 29.07, ops_per_s: 1e6 / 24.17, gbps: null, memory: 'cuda', iterations: 5000, client_cpu_us: 24.5, server_cpu_us: 24.25 },
      { system: ucxCallSystem('none'), workload: 'tensor_arg/tag', bytes: 1048576, p50_us: 58.85, p99_us: 73.92, ops_per_s: 1e6 / 58.85,
        gbps: 1048576 / 58.85 / 1e3, memory: 'cuda', iterations: 5000, client_cpu_us: 59, server_cpu_us: 58.75, receive_p50_us: 26.32, receive_p99_us: 34.03 },
    ]);
  });
});

describe('runUcxCall', () => {
  it('builds and runs the program on host memory: one row per size, each with a time', async () => {
    const lines: string[] = [];
    const { results, skipped } = await runUcxCall('host', [0, 4096], (line) => lines.push(line), { rounds: 500, limitMs: 100_000 });
    expect(skipped).toEqual([]);
    expect(results.map((r) => [r.workload, r.bytes])).toEqual([['small_call_rtt', 0], ['tensor_arg/tag', 4096]]);
    for (const r of results) {
      expect(r.p50_us).toBeGreaterThan(0);
      expect(r.p99_us).toBeGreaterThanOrEqual(r.p50_us!);
      expect(r.iterations).toBe(500);
    }
    expect(results[1]!.receive_p50_us).toBeGreaterThan(0);
    expect(lines).toHaveLength(2);
  }, 120_000);

  it('runs with the server asleep on its worker fd between calls, and with both asleep', async () => {
    for (const wait of ['server', 'both'] as const) {
      const { results, skipped } = await runUcxCall('host', [0], () => {}, { rounds: 200, wait, limitMs: 50_000 });
      expect(skipped).toEqual([]);
      expect(results).toHaveLength(1);
      const row = results[0]!;
      expect(row).toMatchObject({ system: ucxCallSystem(wait), workload: 'small_call_rtt', bytes: 0, iterations: 200 });
      expect(row.p50_us).toBeGreaterThan(0);
      expect(row.server_cpu_us).toBeGreaterThan(0);
      // A sleeping server spends less CPU than the time its calls take: a spinning one spends all
      // of it. (Whether the spinning client of 'server' mode spends more than the server depends on
      // how much of a core the scheduler gives it: under CPU hogs it did not, 12.2 against 7.3 µs.)
      expect(row.server_cpu_us as number).toBeLessThan(row.p50_us!);
    }
  }, 120_000);

  it('runs over shared memory when asked (UCX_MM_ERROR_HANDLING=y in both processes), in rows of their own', async () => {
    const { results, skipped } = await runUcxCall('host', [0, 4096], () => {}, { rounds: 200, sharedMemory: true, limitMs: 50_000 });
    expect(skipped).toEqual([]);
    expect(results.map((r) => [r.system, r.bytes])).toEqual([[ucxCallSystem('none', 'listener', true), 0], [ucxCallSystem('none', 'listener', true), 4096]]);
    expect(ucxCallSystem('none', 'listener', true)).toBe('ucx-call (C, busy-poll, shared memory)');
    for (const r of results) expect(r.p50_us).toBeGreaterThan(0);
  }, 120_000);

  it('connects through the server\'s listener by default, and from worker addresses when asked', async () => {
    const lines: string[] = [];
    const viaAddress = await runUcxCall('host', [4096], (line) => lines.push(line), { rounds: 200, connect: 'address', limitMs: 50_000 });
    expect(viaAddress.skipped).toEqual([]);
    expect(viaAddress.results.map((r) => r.system)).toEqual([ucxCallSystem('none', 'address')]);
    expect(ucxCallSystem('none', 'address')).toBe('ucx-call (C, busy-poll, worker address)');
    // The names the committed result files use.
    expect([ucxCallSystem('none'), ucxCallSystem('server'), ucxCallSystem('both')]).toEqual(['ucx-call (C, busy-poll)', 'ucx-call (C, server sleeps)', 'ucx-call (C, both sleep)']);
    expect(viaAddress.results[0]!.p50_us).toBeGreaterThan(0);
  }, 60_000);

  it('refuses a wait mode, a way to connect or a size it does not know, with a message and exit code 2', async () => {
    const home = ucxHome();
    expect(home).toBeDefined();
    const found = await ucxCallProgram(home!);
    if ('reason' in found) throw new Error(found.reason);
    const env = { ...process.env, LD_LIBRARY_PATH: join(home!, 'lib') };
    const bogusWait = await run(found.bin, ['host', '0'], { env: { ...env, GDRPC_UCX_CALL_WAIT: 'bogus' }, limitMs: 30_000 });
    expect(bogusWait.code).toBe(2);
    expect(bogusWait.stderr).toMatch(/GDRPC_UCX_CALL_WAIT must be none, server or both, got 'bogus'/);
    const bogusConnect = await run(found.bin, ['host', '0'], { env: { ...env, GDRPC_UCX_CALL_CONNECT: 'bogus' }, limitMs: 30_000 });
    expect(bogusConnect.code).toBe(2);
    expect(bogusConnect.stderr).toMatch(/GDRPC_UCX_CALL_CONNECT must be listener or address, got 'bogus'/);
    const badSize = await run(found.bin, ['host', '12x'], { env, limitMs: 30_000 });
    expect(badSize.code).toBe(2);
    expect(badSize.stderr).toMatch(/a size is a byte count, got '12x'/);
  }, 60_000);
});

// With GDRPC_UCX_CALL the program is the one named there, not built here: nothing to remove.
describe.skipIf(process.env.GDRPC_UCX_CALL !== undefined)('removeUcxCallProgram', () => {
  it('removes the folder this process built the program in; the next call builds it again', async () => {
    const home = ucxHome();
    expect(home).toBeDefined();
    const first = await ucxCallProgram(home!);
    expect(first).toHaveProperty('bin');
    const bin = (first as { bin: string }).bin;
    expect(existsSync(bin)).toBe(true);
    removeUcxCallProgram();
    expect(existsSync(dirname(bin))).toBe(false);
    const again = await ucxCallProgram(home!);
    expect(again).toHaveProperty('bin');
    expect(existsSync((again as { bin: string }).bin)).toBe(true);
    expect((again as { bin: string }).bin).not.toBe(bin);
  }, 120_000);
});
