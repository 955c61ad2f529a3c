// Deadlines and cancellation folded into one AbortSignal per call, so that every wait in a call
// (transfer, handler, response) stops for the same reasons and reports the same code.
import { Code, GdrpcError } from '../errors.ts';

/** Milliseconds from now or an absolute Date -> epoch ms (undefined: no deadline). */
export function absoluteDeadline(deadline: number | Date | undefined): number | undefined {
  if (deadline === undefined) return undefined;
  if (deadline instanceof Date) return deadline.getTime();
  if (typeof deadline !== 'number' || Number.isNaN(deadline)) {
    throw new GdrpcError(Code.INVALID_ARGUMENT, `deadline must be milliseconds or a Date, got ${String(deadline)}`);
  }
  return Date.now() + deadline;
}

/** One call's abort source: fires on the caller's signal, the deadline, or an explicit abort. */
export class CallScope {
  readonly controller = new AbortController();
  #timer: NodeJS.Timeout | undefined;
  #unlink: (() => void) | undefined;

  constructor(readonly deadline: number | undefined, parent?: AbortSignal) {
    if (deadline !== undefined) {
      const left = deadline - Date.now();
      if (left <= 0) this.abort(deadlineError());
      else this.#timer = setTimeout(() => this.abort(deadlineError()), left);
    }
    if (parent !== undefined) {
      if (parent.aborted) this.abort(cancelledError(parent.reason));
      else {
        const onAbort = (): void => this.abort(cancelledError(parent.reason));
        parent.addEventListener('abort', onAbort, { once: true });
        this.#unlink = () => parent.removeEventListener('abort', onAbort);
      }
    }
  }

  get signal(): AbortSignal { return this.controller.signal; }
  get aborted(): boolean { return this.controller.signal.aborted; }
  /** The GdrpcError that ended the scope (undefined while live). */
  get reason(): GdrpcError | undefined {
    return this.aborted ? GdrpcError.from(this.controller.signal.reason) : undefined;
  }
  /** Milliseconds left, for the wire (`to`); undefined without a deadline. */
  remainingMs(): number | undefined {
    return this.deadline === undefined ? undefined : Math.max(0, Math.ceil(this.deadline - Date.now()));
  }

  abort(error: GdrpcError): void {
    if (!this.aborted) this.controller.abort(error);
    this.dispose();
  }

  /** Throws the scope's error if it has ended. */
  throwIfAborted(): void {
    if (this.aborted) throw this.reason!;
  }

  /** Stops the timer and detaches from the parent signal. */
  dispose(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#unlink?.();
    this.#unlink = undefined;
  }
}

/** Races `promise` against `signal`: rejects with the signal's GdrpcError when it aborts first. */
export function raceSignal<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(GdrpcError.from(signal.reason));
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(GdrpcError.from(signal.reason));
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => { signal.removeEventListener('abort', onAbort); resolve(value); },
      (error) => { signal.removeEventListener('abort', onAbort); reject(error); },
    );
  });
}

function deadlineError(): GdrpcError {
  return new GdrpcError(Code.DEADLINE_EXCEEDED, 'deadline exceeded');
}

function cancelledError(reason: unknown): GdrpcError {
  if (reason instanceof GdrpcError) return reason;
  return new GdrpcError(Code.CANCELLED, 'call cancelled by the caller', { cause: reason });
}
