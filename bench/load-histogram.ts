// Latency histogram of the load benchmark: logarithmic buckets (about 1% wide) from 1 µs up, so that
// client processes can send theirs to the parent to be merged, instead of millions of samples.

/** Buckets per factor of ten: neighbours differ by 10^(1/230), about 1%. */
const PER_DECADE = 230;
/** Smallest value told apart (ms); anything below falls in the first bucket. */
const FLOOR_MS = 0.001;

/** The plain-data form sent between processes. */
export interface HistogramData { counts: Record<number, number>; n: number; maxMs: number }

/** Counts of latencies (ms) by bucket, plus the exact maximum. */
export class LatencyHistogram {
  readonly #counts = new Map<number, number>();
  #n = 0;
  #max = 0;

  add(ms: number): void {
    const bucket = ms <= FLOOR_MS ? 0 : Math.ceil(Math.log10(ms / FLOOR_MS) * PER_DECADE);
    this.#counts.set(bucket, (this.#counts.get(bucket) ?? 0) + 1);
    this.#n += 1;
    if (ms > this.#max) this.#max = ms;
  }

  merge(data: HistogramData): void {
    for (const [bucket, count] of Object.entries(data.counts)) {
      const b = Number(bucket);
      this.#counts.set(b, (this.#counts.get(b) ?? 0) + count);
    }
    this.#n += data.n;
    this.#max = Math.max(this.#max, data.maxMs);
  }

  get count(): number { return this.#n; }
  get maxMs(): number { return this.#max; }

  /** The upper edge of the bucket holding the p-th percentile (nearest rank); null when empty. */
  percentile(p: number): number | null {
    if (this.#n === 0) return null;
    const rank = Math.max(1, Math.ceil((p / 100) * this.#n));
    let seen = 0;
    for (const bucket of [...this.#counts.keys()].sort((a, b) => a - b)) {
      seen += this.#counts.get(bucket)!;
      if (seen >= rank) return Math.min(this.#max, FLOOR_MS * 10 ** (bucket / PER_DECADE));
    }
    return this.#max;
  }

  toData(): HistogramData {
    return { counts: Object.fromEntries(this.#counts), n: this.#n, maxMs: this.#max };
  }
}
