// What a server call leaves once it is over, and when it goes: its argument tensors back to the
// pool once its results' bytes have left (nothing reads them after), then its afterSend hooks,
// once the tensors it returned `@remote` were pulled too (their pullers read them later); a handle
// nobody pulls ends exposureHoldMs after the call.
import { PostedFrame } from '../connection/posted-frame.ts';
import type { Exposed } from '../remote/remote.ts';
import type { CallArguments } from './call-arguments.ts';

/** What a call's end waits for before its release pass: its RESPONSE frame, posted, or the
 *  transfers of its results. */
export type Sending = Promise<void> | PostedFrame;
const NOTHING_SENT: Promise<void> = Promise.resolve();

/** Settles (never rejects) once `sending` is over. */
function settled(sending: Sending | undefined): Promise<void> {
  if (sending === undefined) return NOTHING_SENT;
  return sending instanceof PostedFrame ? sending.failure().then(() => {}) : sending.then(() => {}, () => {});
}

export class CallAftermath {
  readonly #afterSend: Array<() => void> = [];
  /** The tensors the results passed `@remote`: afterSend waits for their exposures to end, as
   *  nothing reads such a tensor after; one not pulled within exposureHoldMs of the call's end
   *  is ended then. */
  readonly #exposed: Exposed[] = [];
  /** The response's send, once the call ended with nothing to release (no release pass will run
   *  a late afterSend hook: it waits for this itself). */
  #sentWithNothingToRelease: Sending | undefined;
  /** The release pass has run the hooks: a hook registered later runs at once (it was kept and
   *  never run: a pull whose call was cancelled mid-gather kept its handle claimed). */
  #hooksRan = false;

  /** `hookFailed`: told of a hook that threw (the server reports it, as a handler's failure);
   *  the hooks after it run all the same. */
  constructor(private readonly exposureHoldMs: number, private readonly hookFailed: (thrown: unknown) => void = () => {}) {}

  /** Runs one hook: one that throws is reported, and neither stops the others nor becomes an
   *  unhandled rejection, which ended the process (Node's default). */
  #run(fn: () => void): void {
    try {
      fn();
    } catch (thrown) {
      this.hookFailed(thrown);
    }
  }

  /** Tensors a frame of the call's results exposes `@remote`. */
  expose(exposed: readonly Exposed[]): void {
    this.#exposed.push(...exposed);
  }

  /** Runs `fn` once the call is over, its results' bytes have left and the exposures of the
   *  tensors it returned `@remote` have ended (CallContext.afterSend). */
  afterSend(fn: () => void): void {
    if (this.#hooksRan) {
      queueMicrotask(() => this.#run(fn));
      return;
    }
    // Registered after the call ended without anything left to release: run it once the
    // response has left (there is no release pass to run it with).
    const sent = this.#sentWithNothingToRelease;
    if (sent !== undefined) void Promise.allSettled([settled(sent), ...this.#exposed.map((e) => e.ended)]).then(() => this.#run(fn));
    else this.#afterSend.push(fn);
  }

  /** The call is over, `sent` (or not) its answer; `args` its arguments' receives, if any carried
   *  tensor bytes. */
  over(sent: Sending | undefined, args: CallArguments | undefined): void {
    // Handles to tensors returned `@remote` that are not pulled within exposureHoldMs end then:
    // a caller that gave up on its answer (its deadline, a stream it stopped reading) would
    // otherwise hold them, and the handler's afterSend, for as long as its connection lasts.
    const exposed = this.#exposed;
    if (exposed.length > 0) setTimeout(() => { for (const e of exposed) e.end(); }, this.exposureHoldMs).unref();
    // Argument tensors go back to the pool once nothing reads them: after the results' bytes left.
    // A call that received no tensor bytes and has no afterSend hook has nothing to wait for.
    if (args === undefined && this.#afterSend.length === 0) {
      this.#sentWithNothingToRelease = sent ?? NOTHING_SENT;
      return;
    }
    // Each receive's own settling (registered before this) left its tensors with args.
    const runHooks = (): void => {
      this.#hooksRan = true;
      for (const fn of this.#afterSend.splice(0)) this.#run(fn);
    };
    void Promise.allSettled([settled(sent), ...(args?.running ?? [])]).then(() => {
      args?.release();
      if (exposed.length === 0) {
        runHooks();
        return;
      }
      // A tensor returned `@remote` is read by its puller later: a handler that releases it
      // here would have its pull fail (NOT_FOUND) before anyone could pull it.
      void Promise.allSettled(exposed.map((e) => e.ended)).then(runHooks);
    });
  }
}
