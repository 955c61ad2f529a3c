// Stream-ordered tensors: a CUDA tensor can name the stream that produces it, so that a transfer
// waits for that stream's work only, not for everything queued on the device.
import { cuda } from '../cuda.ts';
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

/** Waits for the work that produces each CUDA tensor handed to it. UCX and cuMemcpy are not ordered
 *  with a tensor's stream: a kernel or an asynchronous copy still writing it would race the read. A
 *  tensor that names its producer (producedOn / readyAfter) waits for that event only, and a tag
 *  send may wait for it asynchronously (`defer`: the event comes back to be awaited before the
 *  bytes go). Any other tensor costs one cuCtxSynchronize per device and ProducerSync (a frame, a
 *  block copy): a few µs when the device is idle, but it also waits for unrelated work queued on
 *  the device. */
export class ProducerSync {
  readonly #done = new Set<number>();

  before(tensor: Tensor, options: { defer?: boolean } = {}): CudaEvent | undefined {
    if (tensor.device === 'cpu' || tensor.byteLength === 0) return undefined;
    const event = producerOf(tensor);
    if (event !== undefined) {
      if (options.defer === true) return event;
      event.synchronize();
      return undefined;
    }
    const index = Number(tensor.device.slice('cuda:'.length));
    if (this.#done.has(index)) return undefined;
    cuda.synchronize(index);
    this.#done.add(index);
    return undefined;
  }
}

/** Waits for a producer event that ProducerSync.before deferred. An event closed meanwhile (its
 *  stream closed) no longer says anything, so the whole device is synchronized instead. */
export async function producerDone(event: CudaEvent): Promise<void> {
  if (event.closed) cuda.synchronize(event.device);
  else await event.finished();
}
