// Event-loop stall probe of the load benchmark, run in every peer process.

/** The longest lateness of a 10 ms interval timer: how long this process's event loop stalled. */
export class StallMonitor {
  static readonly PERIOD_MS = 10;
  #max = 0;
  #last = performance.now();
  readonly #timer = setInterval(() => {
    const now = performance.now();
    this.#max = Math.max(this.#max, now - this.#last - StallMonitor.PERIOD_MS);
    this.#last = now;
  }, StallMonitor.PERIOD_MS);

  constructor() { this.#timer.unref(); }

  get maxMs(): number { return this.#max; }
  reset(): void { this.#max = 0; }
  stop(): void { clearInterval(this.#timer); }
}
