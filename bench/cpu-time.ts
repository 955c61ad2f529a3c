// CPU time of the benchmark's two processes: this one (process.cpuUsage, microseconds) and its
// peer (Linux /proc/<pid>/stat, every thread, in clock ticks of 10 ms: a run of a few hundred
// milliseconds reads to a few per cent).

import { readFileSync } from 'node:fs';

/** CPU seconds (user + system) `pid` has used so far, every thread (Linux /proc; NaN elsewhere). */
export function cpuSecondsOf(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;  // utime, stime in clock ticks (USER_HZ 100)
  } catch {
    return Number.NaN;
  }
}

/** CPU µs per call of this process and of the peer `pid`, from when it was made. */
export class CpuMeter {
  readonly #client = process.cpuUsage();
  readonly #server: number;

  constructor(private readonly pid: number) {
    this.#server = cpuSecondsOf(pid);
  }

  /** Per call over `calls` calls; the peer's is null where /proc could not say. */
  perCall(calls: number): { client_cpu_us: number; server_cpu_us: number | null } {
    const c = process.cpuUsage(this.#client);
    const s = cpuSecondsOf(this.pid) - this.#server;
    return { client_cpu_us: (c.user + c.system) / calls, server_cpu_us: Number.isFinite(s) ? (s * 1e6) / calls : null };
  }
}
