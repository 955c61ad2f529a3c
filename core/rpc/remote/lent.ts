// Tensors a caller's allocate hands back as destinations of its own (a pull's `into`): a failed
// receive leaves them to the caller instead of releasing them with what it allocated.
import type { Tensor } from '../../tensor/index.ts';

const lent = new WeakSet<Tensor>();

/** Marks `tensor` as the caller's and returns it, for allocate callbacks. */
export function lentTensor(tensor: Tensor): Tensor {
  lent.add(tensor);
  return tensor;
}

/** Whether `tensor` was lent by a caller (lentTensor). */
export function isLent(tensor: Tensor): boolean {
  return lent.has(tensor);
}
