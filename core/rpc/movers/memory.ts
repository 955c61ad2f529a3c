// Memory a mover can hand to UCX: a tensor's mapped span when it has one (pool tensors), a
// one-off registration otherwise (counted, so the cost of missing pools shows), or for host tag
// operations simply the bytes (UCX registers or copies them itself).
import { MemoryRegion, type Context, type MemorySpan, type TagBuffer } from '../../ucx/index.ts';
import type { Tensor } from '../../tensor/index.ts';
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
