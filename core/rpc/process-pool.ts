// Public access to the process's tensor pools (docs/runtime-api.md "Process pools"): the same pools
// clients receive results into, mapped once on the process's UCX context. Callers allocate their
// arguments here so that sends need no registration per call, without reaching into the runtime.
import { parseDevice, type Device, type TensorPool, type TensorPoolOptions } from '../tensor/index.ts';
import { Accept, checkOptions } from '../tensor/options.ts';
import { Runtime } from './runtime.ts';

/** Default size of a process pool created by processPool or by a Client (64 MiB). */
export const DEFAULT_PROCESS_POOL_BYTES = 64 << 20;

// processPool and createPool keep the runtime alive (an idle worker does not keep Node running) until
// closeProcessPools drops this reference.
let held: Runtime | undefined;

/** The process's shared pool on `device`, the one clients receive results into: mapped with UCX
 *  once, created on first use (default 64 MiB; an explicit `bytes` larger than it has makes a larger
 *  one; overflow allowed unless the creator says otherwise). Pools outlive clients;
 *  closeProcessPools(), once no Client or Server is left, closes them. */
export function processPool(device: Device = 'cpu', options: { bytes?: number; allowOverflow?: boolean } = {}): TensorPool {
  checkOptions('processPool options', options, { bytes: Accept.positiveBytes, allowOverflow: Accept.boolean });
  parseDevice(device, 'processPool device');
  held ??= Runtime.acquire();
  return held.pool(device, { bytes: options.bytes ?? DEFAULT_PROCESS_POOL_BYTES, allowOverflow: options.allowOverflow ?? true, grow: options.bytes !== undefined });
}

/** A pool of the caller's own on the process's UCX context (arguments, handler-made results),
 *  valid across clients; close it when done, or it closes with the process pools. */
export function createPool(options: TensorPoolOptions): TensorPool {
  held ??= Runtime.acquire();
  return held.createPool(options);
}

/** Drops processPool's hold on the process runtime; when no Client or Server uses it either, every
 *  process pool closes (tensors still held from them become released) with the UCX context. */
export async function closeProcessPools(): Promise<void> {
  const runtime = held;
  held = undefined;
  await runtime?.release();
}
