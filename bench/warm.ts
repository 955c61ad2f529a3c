// Warming a call path before it is timed. A fresh process runs gdrpc's call path several times
// slower for its first few thousand calls while V8 compiles it, and how many calls that takes
// depends on the machine: on the 2-core box the compiled package's small call took 124-138 µs p50
// per window of 1,000 calls over the first 2,000, 32 µs from the 4,000th and 25 µs from the
// 7,000th (one scratch run, adaptive polling); a bench that warmed 1,000 calls and timed the next
// 5,000 reported a p50 of that slope. So a bench warms until the path stops getting faster.

/** How a warm-up went: the calls it made, and the p50 of its first and last windows (µs). */
export interface Warmed {
  calls: number;
  firstP50Us: number;
  lastP50Us: number;
}

export interface WarmOptions {
  /** Calls per window whose p50 is compared (default 500). */
  window?: number;
  /** Calls made whatever the windows say (default 4,000). */
  minCalls?: number;
  /** Calls after which the warm-up ends whatever the windows say (default 40,000). */
  maxCalls?: number;
  /** Time after which it ends, once minCalls are made (default 20 s). */
  maxMs?: number;
  /** Windows in a row that must not beat the best p50 so far by 3% (default 6). */
  settleWindows?: number;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[sorted.length >> 1]!;
}

/** When a warm-up is over, from its windows' p50s: once `settleWindows` windows in a row have not
 *  beaten the best p50 before them by 3%, after `minCalls`; at `maxCalls`, or after `maxMs` once
 *  `minCalls` are made, whatever they say. */
export class SettleRule {
  readonly window: number;
  readonly #minCalls: number;
  readonly #maxCalls: number;
  readonly #maxMs: number;
  readonly #settleWindows: number;
  #calls = 0;
  #best = Number.POSITIVE_INFINITY;
  #flat = 0;

  constructor(options: WarmOptions = {}) {
    this.window = options.window ?? 500;
    this.#minCalls = options.minCalls ?? 4000;
    this.#maxCalls = options.maxCalls ?? 40_000;
    this.#maxMs = options.maxMs ?? 20_000;
    this.#settleWindows = options.settleWindows ?? 6;
  }

  get calls(): number { return this.#calls; }

  /** A window of `window` calls ended with p50 `p50Us`, `elapsedMs` after the warm-up began:
   *  whether the warm-up is over. */
  next(p50Us: number, elapsedMs: number): boolean {
    this.#calls += this.window;
    if (p50Us < this.#best * 0.97) {
      this.#best = p50Us;
      this.#flat = 0;
    } else {
      this.#flat += 1;
    }
    if (this.#calls >= this.#maxCalls) return true;
    return this.#calls >= this.#minCalls && (this.#flat >= this.#settleWindows || elapsedMs > this.#maxMs);
  }
}

/** Runs `call` one at a time in windows until SettleRule says the path has stopped getting
 *  faster. */
export async function warmUp(call: () => Promise<unknown>, options: WarmOptions = {}): Promise<Warmed> {
  const rule = new SettleRule(options);
  const times: number[] = new Array<number>(rule.window);
  const started = performance.now();
  let first = Number.NaN;
  let last: number;
  do {
    for (let i = 0; i < rule.window; i += 1) {
      const t0 = process.hrtime.bigint();
      await call();
      times[i] = Number(process.hrtime.bigint() - t0) / 1e3;
    }
    last = median(times);
    if (Number.isNaN(first)) first = last;
  } while (!rule.next(last, performance.now() - started));
  return { calls: rule.calls, firstP50Us: first, lastP50Us: last };
}
