// The process's UCX context and worker, shared by every Client and Server in it (one worker per
// process: DESIGN.md "Progress model"), reference-counted so that the last user closes them.
// Pools mapped on the context belong here too: they live as long as the context, not as long as
// the Client that first wanted one, so that a peer's cuda_ipc mapping of a pool (UCX keeps those
// cached) never points at memory a closed client freed and reallocated.
import { Context, Worker } from '../ucx/index.ts';
import { TensorPool, type Device, type TensorPoolOptions } from '../tensor/index.ts';
import { Dispatcher } from './dispatcher.ts';
import { Accept, invalidOption } from '../tensor/options.ts';
import { SendSlots } from './send-slots.ts';

/** Largest control frame any connection in this process accepts (the receive buffer size). */
export const DEFAULT_FRAME_BYTES = 4 << 20;

/** Worker busy polling (at most 10 s, as the binding allows): the busyPollUs option's rule. */
export const BUSY_POLL_US = Accept.integer(0, 10_000_000, 'microseconds');

/** Whether GDRPC_UNSAFE_RMA asks for the RMA mover, giving up isolation between peers. */
export function unsafeRmaEnabled(): boolean {
  return /^(1|y|yes|on|true)$/i.test(process.env.GDRPC_UNSAFE_RMA ?? '');
}

/** GDRPC_BUSY_POLL_US, checked: a typo there would otherwise fail every Client and Server with a
 *  message about an option nobody passed. */
function busyPollFromEnvironment(): number {
  const text = process.env.GDRPC_BUSY_POLL_US;
  if (text === undefined || text.trim() === '') return 0;
  const value = Number(text);
  if (!BUSY_POLL_US.accepts(value)) throw invalidOption('GDRPC_BUSY_POLL_US', text, BUSY_POLL_US.expected);
  return value;
}

/** Context + worker + control-frame dispatcher of this process. */
export class Runtime {
  static #shared: Runtime | undefined;
  #users = 0;
  /** Where small control frames are sent from. */
  readonly sendSlots = new SendSlots();
  #closing: Promise<void> | undefined;
  /** The pool per device that pool() hands out (the largest asked for so far). */
  readonly #pools = new Map<string, TensorPool>();
  readonly #all = new Set<TensorPool>();

  private constructor(readonly context: Context, readonly worker: Worker, readonly dispatcher: Dispatcher, readonly rma: boolean) {}

  /** Takes a reference on the process runtime, creating it on first use (with `busyPollUs`, else
   *  GDRPC_BUSY_POLL_US from the environment, else 0: later callers share what the first chose). */
  static acquire(options: { busyPollUs?: number } = {}): Runtime {
    let runtime = Runtime.#shared;
    if (runtime === undefined) {
      // Without the RMA feature UCX serves no get or put from a peer, emulated or not: a context
      // with it would let any peer that connects read and write this process's host memory
      // through UCX's software RMA emulation (docs/security.md).
      const rma = unsafeRmaEnabled();
      const busyPollUs = options.busyPollUs ?? busyPollFromEnvironment();
      const context = Context.create({ features: rma ? ['tag', 'rma', 'wakeup'] : ['tag', 'wakeup'] });
      let worker: Worker;
      try {
        worker = Worker.create(context, { busyPollUs });
      } catch (error) {
        context.close();
        throw error;
      }
      runtime = new Runtime(context, worker, new Dispatcher(worker, DEFAULT_FRAME_BYTES), rma);
      Runtime.#shared = runtime;
    }
    runtime.#users += 1;
    return runtime;
  }

  /** The process's pool on `device` (pinned host memory with `pinned`), created on first use with
   *  `bytes`. With `grow`, a request for more bytes than it has makes a larger one that later requests get;
   *  the smaller stays until the runtime closes (its tensors may be live, a peer may map it). */
  pool(device: Device, options: { bytes: number; allowOverflow?: boolean; pinned?: boolean; grow?: boolean }): TensorPool {
    const key = options.pinned === true ? `${device}+pinned` : device;
    let pool = this.#pools.get(key);
    if (pool === undefined || pool.closed || (options.grow === true && pool.stats().capacity < options.bytes)) {
      pool = this.createPool({ device, bytes: options.bytes, allowOverflow: options.allowOverflow ?? true, ...(options.pinned === true ? { pinned: true } : {}) });
      this.#pools.set(key, pool);
    }
    return pool;
  }

  /** A new pool on this runtime's context, closed with it unless closed before. */
  createPool(options: TensorPoolOptions): TensorPool {
    const pool = TensorPool.create(this.context, options);
    this.#all.add(pool);
    return pool;
  }

  /** The open pools made here, for stats and tests. */
  pools(): TensorPool[] { return [...this.#all].filter((pool) => !pool.closed); }

  /** Drops a reference; the last one closes the pools, the worker and the context. */
  async release(): Promise<void> {
    this.#users -= 1;
    if (this.#users > 0) return;
    if (Runtime.#shared === this) Runtime.#shared = undefined;
    // Tensors still held by the application become released (their memory goes with the context).
    for (const pool of this.#all) {
      // A region UCX still uses cannot be unmapped; the worker must close regardless.
      try {
        pool.close({ force: true });
      } catch (error) {
        process.emitWarning(`closing the process pool on ${pool.device}: ${(error as Error).message}`, { code: 'GDRPC_POOL_CLOSE' });
      }
    }
    this.#all.clear();
    this.#pools.clear();
    this.#closing ??= (async () => {
      this.dispatcher.stop();
      await this.worker.close();
      this.context.close();
    })();
    await this.#closing;
  }
}
