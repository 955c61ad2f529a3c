// CUDA streams and events (driver API, through the addon). Work queued on a stream runs in order;
// an event marks a point in a stream that others (the host, another stream, a transfer) wait for.
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import { Code, GdrpcError } from '../errors.ts';
import { checkDevice, driver } from '../cuda-driver.ts';
import { checkSignal, describe, invalid } from '../ucx/check.ts';

/** How long a wait polls once per event-loop turn before it polls once a millisecond: GPU work
 *  that a caller awaits mostly ends within a few ms (a 1 ms timer there would add up to 1 ms to
 *  every step), while a long kernel must not cost a core for its whole run. */
const EAGER_POLL_MS = 10;

/** Resolves once `ready()` says so, polling without blocking the event loop. */
async function pollUntil(ready: () => boolean, signal: AbortSignal | undefined): Promise<void> {
  const eagerUntil = performance.now() + EAGER_POLL_MS;
  while (!ready()) {
    signal?.throwIfAborted();
    if (performance.now() < eagerUntil) await nextTurn();
    else await sleep(1);
  }
}

function closedError(what: string): GdrpcError {
  return new GdrpcError(Code.FAILED_PRECONDITION, `${what} is closed`);
}

/** A CUDA event in the primary context of `device`. */
export class CudaEvent {
  #handle: bigint | undefined;
  /** Recorded at least once (an event never recorded counts as complete in CUDA). */
  #recorded = false;

  private constructor(readonly device: number, handle: bigint, readonly timing: boolean) {
    this.#handle = handle;
  }

  /** A new event; `timing` (default false) makes it usable with elapsedSince(). */
  static create(device: number, options: { timing?: boolean } = {}): CudaEvent {
    const timing = options.timing ?? false;
    if (typeof timing !== 'boolean') throw invalid(`CudaEvent options.timing must be a boolean, got ${describe(timing)}`);
    const index = checkDevice(device);
    return new CudaEvent(index, driver().eventCreate(index, timing), timing);
  }

  /** The driver handle (for the binding); throws once closed. */
  get handle(): bigint {
    if (this.#handle === undefined) throw closedError('CudaEvent');
    return this.#handle;
  }
  get closed(): boolean { return this.#handle === undefined; }

  /** Marks the current end of `stream`'s work: the event completes when that work has. */
  record(stream: CudaStream): this {
    checkStream(stream, 'stream');
    if (stream.device !== this.device) throw invalid(`an event of cuda:${this.device} cannot be recorded on a stream of cuda:${stream.device}`);
    driver().eventRecord(this.device, this.handle, stream.handle);
    this.#recorded = true;
    return this;
  }

  /** Whether the work it marks is done (true for an event never recorded). */
  get done(): boolean { return driver().eventQuery(this.device, this.handle); }

  /** Blocks the calling thread until the marked work is done. */
  synchronize(): void { driver().eventSynchronize(this.device, this.handle); }

  /** Resolves when the marked work is done, without blocking the event loop. */
  async finished(options: { signal?: AbortSignal } = {}): Promise<void> {
    const signal = checkSignal(options.signal, 'options.signal');
    const handle = this.handle;
    await pollUntil(() => driver().eventQuery(this.device, handle), signal);
  }

  /** Milliseconds of GPU time between `start` and this event (both recorded with timing, both done). */
  elapsedSince(start: CudaEvent): number {
    if (!(start instanceof CudaEvent)) throw invalid(`start must be a CudaEvent, got ${describe(start)}`);
    if (!this.timing || !start.timing) throw invalid('elapsedSince needs two events created with { timing: true }');
    if (!this.#recorded || !start.#recorded) throw invalid('elapsedSince needs two recorded events');
    return driver().eventElapsed(this.device, start.handle, this.handle);
  }

  /** Destroys the event (idempotent); work already recorded is unaffected. */
  close(): void {
    const handle = this.#handle;
    if (handle === undefined) return;
    this.#handle = undefined;
    driver().eventDestroy(this.device, handle);
  }
}

/** A non-blocking CUDA stream in the primary context of `device`. */
export class CudaStream {
  #handle: bigint | undefined;
  /** Recorded by record() when no event is passed; reused, so that marking costs no allocation. */
  #marker: CudaEvent | undefined;

  private constructor(readonly device: number, handle: bigint) {
    this.#handle = handle;
  }

  /** A new stream on `device` (non-blocking: it does not wait for the legacy default stream). */
  static create(device: number): CudaStream {
    const index = checkDevice(device);
    return new CudaStream(index, driver().streamCreate(index));
  }

  /** The driver handle (for the binding); throws once closed. */
  get handle(): bigint {
    if (this.#handle === undefined) throw closedError('CudaStream');
    return this.#handle;
  }
  get closed(): boolean { return this.#handle === undefined; }

  /** Marks the current end of this stream's work. Without an event, the stream's own marker is
   *  re-recorded and returned: it then stands for this point or a later one (never an earlier). */
  record(event?: CudaEvent): CudaEvent {
    const target = event ?? (this.#marker ??= CudaEvent.create(this.device));
    return target.record(this);
  }

  /** Work queued on this stream from now on waits for `event` (on the GPU; the host does not wait). */
  waitFor(event: CudaEvent): this {
    if (!(event instanceof CudaEvent)) throw invalid(`event must be a CudaEvent, got ${describe(event)}`);
    driver().streamWaitEvent(this.device, this.handle, event.handle);
    return this;
  }

  /** Whether every piece of work queued so far is done. */
  get idle(): boolean { return driver().streamQuery(this.device, this.handle); }

  /** Blocks the calling thread until the work queued so far is done. */
  synchronize(): void { driver().streamSynchronize(this.device, this.handle); }

  /** Resolves when the work queued so far is done, without blocking the event loop. */
  async finished(options: { signal?: AbortSignal } = {}): Promise<void> {
    const signal = checkSignal(options.signal, 'options.signal');
    const handle = this.handle;
    await pollUntil(() => driver().streamQuery(this.device, handle), signal);
  }

  /** Destroys the stream (idempotent). CUDA lets queued work finish first. */
  close(): void {
    const handle = this.#handle;
    if (handle === undefined) return;
    this.#handle = undefined;
    this.#marker?.close();
    driver().streamDestroy(this.device, handle);
  }
}

/** Throws INVALID_ARGUMENT unless `value` is an open CudaStream. */
export function checkStream(value: unknown, name: string): CudaStream {
  if (!(value instanceof CudaStream)) throw invalid(`${name} must be a CudaStream, got ${describe(value)}`);
  if (value.closed) throw invalid(`${name} is closed`);
  return value;
}
