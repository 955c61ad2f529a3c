// Deadlines and cancellation folded into one AbortSignal per call, so that every wait in a call
// (transfer, handler, response) stops for the same reasons and reports the same code.
import { Code, GdrpcError } from '../../errors.ts';
import { whenAborted } from '../../abort.ts';
import { methodName } from './method-name.ts';
import type { MethodDescriptor } from '../../schema/descriptor.ts';

/** Milliseconds from now or an absolute Date -> epoch ms (undefined: no deadline). */
export function absoluteDeadline(deadline: number | Date | undefined): number | undefined {
  if (deadline === undefined) return undefined;
  if (deadline instanceof Date) return deadline.getTime();
  if (typeof deadline !== 'number' || Number.isNaN(deadline)) {
    throw new GdrpcError(Code.INVALID_ARGUMENT, `deadline must be milliseconds or a Date, got ${String(deadline)}`);
  }
  // Infinity (or anything past what a Date can hold) means no deadline at all.
  if (!Number.isFinite(deadline) || deadline > MAX_DEADLINE_MS) return undefined;
  return Date.now() + deadline;
}

/** Longest deadline taken as a deadline (about 100 million days, the range of a Date). */
const MAX_DEADLINE_MS = 8.64e15;
/** Longest delay a Node timer takes; longer ones fire at once, so they are armed in steps. */
const MAX_TIMER_MS = 0x7fff_ffff;

/** One call's abort source: fires on the caller's signal, the deadline, or an explicit abort.
 *  Callbacks rather than an AbortController on the hot path: an AbortSignal (and its listeners)
 *  costs microseconds per call, so one is made only when someone asks for `signal`. */
export class CallScope {
  #reason: GdrpcError | undefined;
  /** A Set, not an array: a client-streaming call races each item's receive, and taking one out
   *  of an array of thousands (indexOf, splice) made a flood of items quadratic. */
  readonly #callbacks = new Set<(error: GdrpcError) => void>();
  #controller: AbortController | undefined;
  #timer: NodeJS.Timeout | undefined;
  #unlink: (() => void) | undefined;

  /** When the scope began (ms since the epoch), for the deadline's error; 0 without a deadline. */
  readonly #began: number = 0;

  /** The call's method, named by its deadline's error. */
  readonly #method: Pick<MethodDescriptor, 'service' | 'name'> | undefined;

  constructor(readonly deadline: number | undefined, parent?: AbortSignal, method?: Pick<MethodDescriptor, 'service' | 'name'>) {
    this.#method = method;
    if (deadline !== undefined) {
      this.#began = Date.now();
      const left = deadline - this.#began;
      if (left <= 0) this.abort(this.#deadlineError());
      else this.#arm(deadline);
    }
    if (parent !== undefined) {
      if (parent.aborted) this.abort(cancelledError(parent.reason));
      // One listener on the caller's signal however many calls share it (core/abort.ts).
      else this.#unlink = whenAborted(parent, () => this.abort(cancelledError(parent.reason)));
    }
  }

  /** Arms the deadline timer, in steps of at most MAX_TIMER_MS. */
  #arm(deadline: number): void {
    const left = deadline - Date.now();
    if (left <= 0) return this.abort(this.#deadlineError());
    this.#timer = setTimeout(() => (left > MAX_TIMER_MS ? this.#arm(deadline) : this.abort(this.#deadlineError())), Math.min(left, MAX_TIMER_MS));
  }

  /** An AbortSignal that aborts with the scope (made on first use). */
  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController();
      if (this.#reason !== undefined) this.#controller.abort(this.#reason);
    }
    return this.#controller.signal;
  }
  get aborted(): boolean { return this.#reason !== undefined; }
  /** The GdrpcError that ended the scope (undefined while live). */
  get reason(): GdrpcError | undefined { return this.#reason; }
  /** Milliseconds left, for the wire (`to`); undefined without a deadline. */
  remainingMs(): number | undefined {
    return this.deadline === undefined ? undefined : Math.max(0, Math.ceil(this.deadline - Date.now()));
  }

  /** Runs `fn` when the scope aborts (at once if it has); returns the unsubscriber. */
  onAbort(fn: (error: GdrpcError) => void): () => void {
    if (this.#reason !== undefined) {
      fn(this.#reason);
      return () => {};
    }
    // The same function twice runs twice, as it would from an array.
    const callback = this.#callbacks.has(fn) ? (error: GdrpcError): void => fn(error) : fn;
    this.#callbacks.add(callback);
    return () => { this.#callbacks.delete(callback); };
  }

  /** `promise`, or the scope's error if the scope aborts first. A value that comes after the
   *  deadline, before its timer ran (a busy event loop runs timers late), is refused too: no phase
   *  of a call succeeds past its deadline. */
  race<T>(promise: Promise<T>): Promise<T> {
    if (this.#reason !== undefined) {
      // The scope's error is the outcome: a later failure of `promise` is not news to anyone.
      promise.catch(() => {});
      return Promise.reject(this.#reason);
    }
    return new Promise<T>((resolve, reject) => {
      const off = this.onAbort(reject);
      promise.then((value) => {
        off();
        if (this.deadline !== undefined && this.#reason === undefined && Date.now() >= this.deadline) this.abort(this.#deadlineError());
        if (this.#reason !== undefined) reject(this.#reason);
        else resolve(value);
      }, (error) => { off(); reject(error); });
    });
  }

  abort(error: GdrpcError): void {
    if (this.#reason === undefined) {
      this.#reason = error;
      this.#controller?.abort(error);
      const callbacks = [...this.#callbacks];
      this.#callbacks.clear();
      for (const fn of callbacks) fn(error);
    }
    this.dispose();
  }

  /** Throws the scope's error if it has ended. */
  throwIfAborted(): void {
    if (this.#reason !== undefined) throw this.#reason;
  }

  /** Like throwIfAborted, and ends the scope first if its deadline has passed though its timer has
   *  not run yet (what race() checks for a value that settles late; for a phase with no promise). */
  throwIfPastDeadline(): void {
    if (this.deadline !== undefined && this.#reason === undefined && Date.now() >= this.deadline) this.abort(this.#deadlineError());
    this.throwIfAborted();
  }

  /** DEADLINE_EXCEEDED naming the call and its deadline (from when the scope began). */
  #deadlineError(): GdrpcError {
    const after = this.deadline === undefined ? '' : `, its deadline ${Math.max(0, this.deadline - this.#began)} ms after it began`;
    return new GdrpcError(Code.DEADLINE_EXCEEDED, `deadline exceeded${this.#method === undefined ? '' : ` (${methodName(this.#method)}${after})`}`);
  }

  /** Stops the timer and detaches from the parent signal. */
  dispose(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#unlink?.();
    this.#unlink = undefined;
  }
}

function cancelledError(reason: unknown): GdrpcError {
  if (reason instanceof GdrpcError) return reason;
  return new GdrpcError(Code.CANCELLED, 'call cancelled by the caller', { cause: reason });
}
