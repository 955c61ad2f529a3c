// Memory a mover can hand to UCX: a tensor's mapped span when it has one (pool tensors), a
// one-off registration otherwise (counted, so the cost of missing pools shows), or for host tag
// operations simply the bytes (UCX registers or copies them itself).
import { MemoryRegion, type Context, type MemorySpan, type TagBuffer } from '../../ucx/index.ts';
import type { Tensor } from '../../tensor/index.ts';
import { cuda } from '../../cuda.ts';
import type { CudaEvent } from '../../compute/stream.ts';
import { producerOf } from '../../compute/ready.ts';
import { Code, GdrpcError } from '../../errors.ts';
import { memoryTypeOf, type MoverStats } from '../runtime/memory-support.ts';

/** A span covering `tensor`, and how to give it back. */
export function mappedSpan(tensor: Tensor, context: Context, stats: MoverStats): { span: MemorySpan; release: () => void } {
  const span = tensor.span();
  if (span !== undefined) return { span, release: () => {} };
  stats.oneOffRegistrations += 1;
  const memoryType = memoryTypeOf(tensor);
  const region = MemoryRegion.map(context, { address: tensor.address, length: tensor.byteLength, memoryType });
  // What UCX detected (ucp_mem_query), not what was asked: a device pointer treated as host memory
  // would be read by the CPU. staging.ts stages such tensors before they get here; this is the guard.
  if (memoryType === 'cuda' && region.memoryType !== 'cuda') {
    const detected = region.memoryType;
    region.close();
    throw new GdrpcError(Code.FAILED_PRECONDITION, `UCX mapped ${tensor.byteLength} bytes of ${tensor.device} memory as '${detected}', not '${memoryType}': cannot move it without staging`);
  }
  return { span: region.span(0, tensor.byteLength), release: () => region.close() };
}

/** What a tag send or receive of `tensor` takes: the mapped span, or the host bytes. */
export function tagBuffer(tensor: Tensor, context: Context, stats: MoverStats): { buffer: TagBuffer; release: () => void } {
  const span = tensor.span();
  if (span !== undefined) return { buffer: span, release: () => {} };
  if (tensor.device === 'cpu') return { buffer: tensor.bytes(), release: () => {} };
  const mapped = mappedSpan(tensor, context, stats);
  return { buffer: mapped.span, release: mapped.release };
}

/** Waits for the work that produces each CUDA tensor handed to it. UCX is not stream-ordered: a
 *  kernel or an asynchronous copy still writing a tensor would race the transfer reading it. A
 *  tensor that names its producer (producedOn / readyAfter) waits for that event only, and a tag
 *  send may wait for it asynchronously (`defer`: the event comes back to be awaited before the
 *  bytes go). Any other tensor costs one cuCtxSynchronize per device and frame: a few µs when the
 *  device is idle, but it also waits for unrelated work queued on the device. */
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
