// The process's UCX context and worker, shared by every Client and Server in it (one worker per
// process: DESIGN.md "Progress model"), reference-counted so that the last user closes them.
import { Context, Worker } from '../ucx/index.ts';
import { Dispatcher } from './dispatcher.ts';
import { SendSlots } from './send-slots.ts';

/** Largest control frame any connection in this process accepts (the receive buffer size). */
export const DEFAULT_FRAME_BYTES = 4 << 20;

/** Context + worker + control-frame dispatcher of this process. */
export class Runtime {
  static #shared: Runtime | undefined;
  #users = 0;
  /** Where small control frames are sent from. */
  readonly sendSlots = new SendSlots();
  #closing: Promise<void> | undefined;

  private constructor(readonly context: Context, readonly worker: Worker, readonly dispatcher: Dispatcher) {}

  /** Takes a reference on the process runtime, creating it on first use (with `busyPollUs`, else
   *  GDRPC_BUSY_POLL_US from the environment, else 0: later callers share what the first chose). */
  static acquire(options: { busyPollUs?: number } = {}): Runtime {
    let runtime = Runtime.#shared;
    if (runtime === undefined) {
      const context = Context.create();
      const worker = Worker.create(context, { busyPollUs: options.busyPollUs ?? Number(process.env.GDRPC_BUSY_POLL_US ?? 0) });
      runtime = new Runtime(context, worker, new Dispatcher(worker, DEFAULT_FRAME_BYTES));
      Runtime.#shared = runtime;
    }
    runtime.#users += 1;
    return runtime;
  }

  /** Drops a reference; the last one closes the worker and the context. */
  async release(): Promise<void> {
    this.#users -= 1;
    if (this.#users > 0) return;
    if (Runtime.#shared === this) Runtime.#shared = undefined;
    this.#closing ??= (async () => {
      this.dispatcher.stop();
      await this.worker.close();
      this.context.close();
    })();
    await this.#closing;
  }
}
