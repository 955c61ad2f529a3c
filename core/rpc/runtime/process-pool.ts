// Public access to a runtime's tensor pools (docs/runtime-api.md "Process pools"): the same pools
// clients receive results into, mapped once on the runtime's UCX context. Callers allocate their
// arguments here so that sends need no registration per call, without reaching into the runtime.
import { parseDevice, type Device, type TensorPool, type TensorPoolOptions } from '../../tensor/index.ts';
import { Accept, checkOptions, rule } from '../../tensor/options.ts';
import { Runtime } from './runtime.ts';

/** Default size of a process pool created by processPool or by a Client (64 MiB). */
export const DEFAULT_PROCESS_POOL_BYTES = 64 << 20;

const RUNTIME = rule('a Runtime', (value) => value instanceof Runtime);

/** The runtime's shared pool on `device` (default runtime unless `runtime`), the one clients
 *  receive results into: mapped with UCX once, created on first use (default 64 MiB; an explicit
 *  `bytes` larger than it has makes a larger one; overflow allowed unless the creator says
 *  otherwise). Pools outlive clients; closeProcessPools(), once no Client or Server is left,
 *  closes the default runtime's; an explicit runtime's close with it. */
export function processPool(device: Device = 'cpu', options: { bytes?: number; allowOverflow?: boolean; runtime?: Runtime } = {}): TensorPool {
  checkOptions('processPool options', options, { bytes: Accept.positiveBytes, allowOverflow: Accept.boolean, runtime: RUNTIME });
  parseDevice(device, 'processPool device');
  const runtime = held(options.runtime);
  return runtime.pool(device, { bytes: options.bytes ?? DEFAULT_PROCESS_POOL_BYTES, allowOverflow: options.allowOverflow ?? true, grow: options.bytes !== undefined });
}

/** A pool of the caller's own on the runtime's UCX context (default runtime unless `runtime`),
 *  valid across its clients; close it when done, or it closes with the runtime's pools. */
export function createPool(options: TensorPoolOptions & { runtime?: Runtime }): TensorPool {
  // Anything but an options object goes on to TensorPool.create, which says what is wrong with it.
  if (typeof options !== 'object' || options === null) return held(undefined).createPool(options);
  const { runtime, ...pool } = options;
  checkOptions('createPool options', { runtime }, { runtime: RUNTIME });
  return held(runtime).createPool(pool);
}

/** Drops processPool's hold on the default runtime (or on `runtime`); when no Client or Server
 *  uses the default runtime either, its pools close (tensors still held from them become
 *  released) with its UCX context. An explicit runtime's pools close with Runtime.close(). */
export async function closeProcessPools(runtime: Runtime | undefined = Runtime.current()): Promise<void> {
  await runtime?.releasePoolHold();
}

/** `runtime`, or the default one held open for its pools (an idle worker does not keep Node running). */
function held(runtime: Runtime | undefined): Runtime {
  if (runtime !== undefined) return runtime;
  const fallback = Runtime.default();
  fallback.holdPools();
  return fallback;
}
