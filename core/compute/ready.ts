// Stream-ordered tensors: a CUDA tensor can name the stream that produces it, so that a transfer
// waits for that stream's work only, not for everything queued on the device.
import type { Tensor } from '../tensor/index.ts';
import { invalid, describe } from '../ucx/check.ts';
import { checkStream, CudaEvent, type CudaStream } from './stream.ts';

const producers = new WeakMap<Tensor, CudaEvent>();

/** Says that `tensor` is being written by work queued on `stream` so far: a send of it waits for
 *  that work (an event recorded now) instead of synchronizing the whole device. Returns `tensor`. */
export function producedOn<T extends Tensor>(tensor: T, stream: CudaStream): T {
  checkStream(stream, 'stream');
  if (tensor.device !== `cuda:${stream.device}`) throw invalid(`producedOn: a tensor on ${tensor.device} and a stream of cuda:${stream.device}`);
  producers.set(tensor, stream.record());
  return tensor;
}

/** Says that `tensor` is complete once `event` is (an event the caller recorded and keeps open). */
export function readyAfter<T extends Tensor>(tensor: T, event: CudaEvent): T {
  if (!(event instanceof CudaEvent)) throw invalid(`readyAfter: event must be a CudaEvent, got ${describe(event)}`);
  if (tensor.device !== `cuda:${event.device}`) throw invalid(`readyAfter: a tensor on ${tensor.device} and an event of cuda:${event.device}`);
  producers.set(tensor, event);
  return tensor;
}

/** The event that marks the end of `tensor`'s production, when one was given and is still open. */
export function producerOf(tensor: Tensor): CudaEvent | undefined {
  const event = producers.get(tensor);
  return event !== undefined && !event.closed ? event : undefined;
}
