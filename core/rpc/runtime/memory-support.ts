// What memory this process moves and receives, as every layer of a call asks it: whether `@cuda`
// tensors land in GPU memory here, a tensor's memory type as the wire names it, and the runtime's
// counter of one-off registrations. It sits with the runtime, below the movers, so that the
// runtime, the handshake and the exposed-tensor table do not reach up to them.
import { cuda } from '../../cuda.ts';
import type { Tensor } from '../../tensor/index.ts';

/** Counters of memory registered per transfer because the tensor was not in a mapped pool (one
 *  set per Runtime). */
export interface MoverStats { oneOffRegistrations: number }

/** Whether this process receives `@cuda` tensors into GPU memory (else into host memory). */
export function cudaReceives(): boolean {
  return cuda.available() && cuda.deviceCount() > 0;
}

/** 'host' or 'cuda', as the wire says it. */
export function memoryTypeOf(tensor: Tensor): 'host' | 'cuda' {
  return tensor.device === 'cpu' ? 'host' : 'cuda';
}
