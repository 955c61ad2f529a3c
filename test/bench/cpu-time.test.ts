// The benchmarks' CPU meter (bench/cpu-time.ts): this process's CPU from process.cpuUsage, a
// peer's from /proc (Linux), per call.
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { CpuMeter, cpuSecondsOf } from '../../bench/cpu-time.ts';

/** Keeps this thread busy until it has used `ms` of CPU (not of the clock: on a busy machine the
 *  two differ). */
function spin(ms: number): void {
  const start = process.cpuUsage();
  for (;;) {
    const used = process.cpuUsage(start);
    if ((used.user + used.system) / 1000 >= ms) return;
  }
}

describe.runIf(process.platform === 'linux')('cpu-time', () => {
  it("reads a process's CPU seconds from /proc, and NaN for a process that is not there", () => {
    const before = cpuSecondsOf(process.pid);
    spin(150);
    expect(cpuSecondsOf(process.pid)).toBeGreaterThan(before);
    expect(cpuSecondsOf(2 ** 30)).toBeNaN();
  });

  it('counts both processes per call: this one busy, a sleeping peer near nothing', async () => {
    const peer = spawn(process.execPath, ['-e', 'console.log("up"); setTimeout(() => {}, 20000)'], { stdio: ['ignore', 'pipe', 'ignore'] });
    try {
      // Measured once it is up and asleep: its start-up is not what the meter is asked about.
      await new Promise((resolve) => peer.stdout!.once('data', resolve));
      const meter = new CpuMeter(peer.pid!);
      spin(200);
      const { client_cpu_us, server_cpu_us } = meter.perCall(10);
      // 200 ms of this thread's CPU over 10 calls: 20,000 µs a call at least.
      expect(client_cpu_us).toBeGreaterThanOrEqual(20_000);
      expect(server_cpu_us).not.toBeNull();
      expect(server_cpu_us!).toBeLessThan(client_cpu_us);
    } finally {
      peer.kill();
    }
  });
});
