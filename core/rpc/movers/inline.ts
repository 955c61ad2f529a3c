// Inline mover: the bytes ride inside the frame (small host tensors; always for 0 bytes).
import { cuda } from '../../cuda.ts';
import type { Tensor } from '../../tensor/index.ts';
import type { TensorWire } from '../../wire/frames.ts';
import type { Mover, Outgoing } from './mover.ts';
import { memoryTypeOf } from '../runtime/memory-support.ts';

export const inlineMover: Mover = {
  name: 'inline',

  prepare(tensor: Tensor): Outgoing {
    // A copy: the frame is encoded later and the caller may reuse its tensor once the call returns.
    const bytes = new Uint8Array(tensor.byteLength);
    if (tensor.byteLength > 0) {
      if (tensor.device === 'cpu') bytes.set(tensor.bytes());
      else cuda.copy(bytes, tensor.address, tensor.byteLength);
    }
    const wire: TensorWire = { dt: tensor.dtype, sh: [...tensor.shape], n: tensor.byteLength, mt: memoryTypeOf(tensor), m: 'i', b: bytes };
    return { wire, start: () => Promise.resolve() };
  },

  async receive(wire: TensorWire, dest: Tensor): Promise<void> {
    if (wire.n === 0) return;
    if (dest.device === 'cpu') dest.bytes().set(wire.b!);
    else cuda.copy(dest.address, wire.b!, wire.n);
  },

  async refuse(): Promise<void> { /* nothing outstanding */ },
};
