// The addon's CUDA shim, checked: what core/cuda.ts and core/compute call through (internal).
import { Code, GdrpcError } from './errors.ts';
import { native } from './native.ts';
import { describe, invalid } from './ucx/check.ts';
import type { NativeCuda } from './ucx/native-types.ts';

/** The shim; FAILED_PRECONDITION with the reason when there is no usable driver. */
export function driver(): NativeCuda {
  const shim = native().cuda;
  if (!shim.available()) {
    throw new GdrpcError(Code.FAILED_PRECONDITION, `CUDA is unavailable: ${shim.unavailableReason() ?? 'unknown reason'}`);
  }
  return shim;
}

/** `value` as a device index of this machine; INVALID_ARGUMENT otherwise. */
export function checkDevice(value: unknown, name = 'device'): number {
  const shim = driver();
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value >= shim.deviceCount()) {
    throw invalid(`${name} must be a device index in [0, ${shim.deviceCount()}), got ${describe(value)}`);
  }
  return value;
}

