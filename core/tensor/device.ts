// Device names: 'cpu' or 'cuda:N'. Parsed once here so that every other file deals in indices.
import { Code, GdrpcError } from '../errors.ts';
import { cuda } from '../cuda.ts';

/** Where a tensor's bytes live. */
export type Device = 'cpu' | `cuda:${number}`;

/** A parsed device: host memory, or the CUDA device with this index. */
export type DeviceKind = { kind: 'cpu' } | { kind: 'cuda'; index: number };

const CUDA_DEVICE = /^cuda:(0|[1-9][0-9]{0,5})$/;

/** Parses a device name; INVALID_ARGUMENT for anything but 'cpu' or 'cuda:N'. */
export function parseDevice(device: unknown, what = 'device'): DeviceKind {
  if (device === 'cpu') return { kind: 'cpu' };
  const match = typeof device === 'string' ? CUDA_DEVICE.exec(device) : null;
  if (!match) {
    throw new GdrpcError(Code.INVALID_ARGUMENT, `${what}: expected 'cpu' or 'cuda:N', got ${JSON.stringify(device)}`);
  }
  return { kind: 'cuda', index: Number(match[1]) };
}

/** True for 'cpu' and 'cuda:N'. */
export function isDevice(value: unknown): value is Device {
  return value === 'cpu' || (typeof value === 'string' && CUDA_DEVICE.test(value));
}

/** Checks that CUDA device `index` can be used now: FAILED_PRECONDITION without CUDA, INVALID_ARGUMENT past the last device. */
export function requireCudaDevice(index: number): void {
  if (!cuda.available()) {
    throw new GdrpcError(Code.FAILED_PRECONDITION, `cuda:${index} requested but CUDA is unavailable: ${cuda.unavailableReason() ?? 'unknown reason'}`);
  }
  const count = cuda.deviceCount();
  if (index >= count) {
    throw new GdrpcError(Code.INVALID_ARGUMENT, `cuda:${index} does not exist (this machine has ${count} CUDA device${count === 1 ? '' : 's'})`);
  }
}
