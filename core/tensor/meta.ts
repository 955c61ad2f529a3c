// How a tensor is described on the wire: plain data the RPC layer puts into a header, and the
// check it runs on a description received from a peer before allocating anything for it.
import { Code, GdrpcError } from '../errors.ts';
import { parseDevice, type Device } from './device.ts';
import { checkDType, type DType } from './dtype.ts';
import { checkShape } from './shape.ts';
import type { Tensor } from './tensor.ts';

/** A tensor's description without its bytes. */
export interface TensorMeta {
  dtype: DType;
  shape: number[];
  byteLength: number;
  device: Device;
}

/** The description of `tensor`. */
export function tensorMeta(tensor: Tensor): TensorMeta {
  return { dtype: tensor.dtype, shape: [...tensor.shape], byteLength: tensor.byteLength, device: tensor.device };
}

/** Validates an untrusted description (dtype, shape, byteLength consistent, device); INVALID_ARGUMENT naming `what`. */
export function parseTensorMeta(value: unknown, what = 'tensor'): TensorMeta {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new GdrpcError(Code.INVALID_ARGUMENT, `${what}: expected a tensor description object`);
  }
  const record = value as Record<string, unknown>;
  const dtype = checkDType(record.dtype, `${what}.dtype`);
  const info = checkShape(record.shape, dtype, `${what}.shape`);
  if (record.byteLength !== info.byteLength) {
    throw new GdrpcError(Code.INVALID_ARGUMENT,
      `${what}.byteLength: ${String(record.byteLength)} does not match shape [${info.shape.join(', ')}] of ${dtype} (${info.byteLength} bytes)`);
  }
  parseDevice(record.device, `${what}.device`);
  return { dtype, shape: [...info.shape], byteLength: info.byteLength, device: record.device as Device };
}
