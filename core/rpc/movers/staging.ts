// Staging through host memory (docs/gpu.md "Memory that UCX cannot map"): where UCX cannot take a
// CUDA tensor as CUDA memory (a UCX without CUDA support, a pool it could not map as 'cuda'), the
// bytes go through a bounce tensor in the process's pinned host pool: device -> bounce before a
// send, bounce -> device after a receive. Each side decides for its own memory; the path is then
// 'staged', and a call that demands noStaging is refused before anything moves.
import { cuda } from '../../cuda.ts';
import type { Tensor } from '../../tensor/index.ts';
import type { Runtime } from '../runtime/runtime.ts';

/** Size of the process's pinned bounce pool; larger tensors register a one-off bounce (counted). */
export const STAGING_POOL_BYTES = 64 << 20;

/** Why `tensor` cannot be handed to UCX as it is and must go through a host bounce, or undefined. */
export function stagingReason(tensor: Tensor, runtime: Runtime): string | undefined {
  if (tensor.byteLength === 0) return undefined;
  if (tensor.device === 'cpu') return runtime.hostStagingForTests ? 'host staging forced for tests' : undefined;
  const pool = tensor.pool;
  if (pool?.staged === true) return `its pool on ${tensor.device} is not mapped by UCX: ${pool.stagingReason ?? 'unknown reason'}`;
  if (tensor.span() !== undefined) return undefined;
  if (!runtime.mapsCuda) return `this UCX cannot register CUDA memory (it supports ${runtime.context.memoryTypes().join(', ')})`;
  return undefined;
}

/** A host tensor shaped like `like`, from the process's bounce pool (pinned where CUDA exists). */
export function bounceFor(like: Tensor, runtime: Runtime): Tensor {
  const pinned = cuda.available();
  return runtime.pool('cpu', { bytes: STAGING_POOL_BYTES, allowOverflow: true, ...(pinned ? { pinned: true } : {}) })
    .allocate([...like.shape], like.dtype);
}
