// What became of a frame handed to the outbox: sent (its message handed to UCX) or failed. The
// small call's frames are told so without a promise each; a promise is made only for whoever
// asks (PostedFrame.failure).

/** Told what became of a queued frame: handed to UCX (its message sent), or failed. */
export interface FrameDone { sent(): void; failed(error: unknown): void }

/** What became of a frame handed to Connection.post (no promise unless someone asks). */
export class PostedFrame implements FrameDone {
  #fate: 'pending' | 'sent' | 'failed' = 'pending';
  #error: unknown;
  #waiters: Array<(error: unknown) => void> | undefined;

  /** `onFailed` runs in a microtask of its own when the frame fails. */
  constructor(private readonly onFailed?: (error: unknown) => void) {}

  sent(): void { this.#settle('sent', undefined); }

  failed(error: unknown): void {
    const onFailed = this.onFailed;
    if (this.#settle('failed', error) && onFailed !== undefined) queueMicrotask(() => onFailed(error));
  }

  /** Undefined once the frame left; why it did not, once that is known (a promise is made only
   *  here, for whoever asks). */
  failure(): Promise<unknown> {
    if (this.#fate !== 'pending') return Promise.resolve(this.#error);
    return new Promise((resolve) => { (this.#waiters ??= []).push(resolve); });
  }

  /** Whether this was the frame's fate (the first one told). */
  #settle(fate: 'sent' | 'failed', error: unknown): boolean {
    if (this.#fate !== 'pending') return false;
    this.#fate = fate;
    this.#error = error;
    for (const resolve of this.#waiters ?? []) resolve(error);
    this.#waiters = undefined;
    return true;
  }
}
