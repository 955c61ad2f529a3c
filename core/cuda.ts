// The CUDA driver shim (contract: docs/binding.md "CUDA shim"). The addon loads libcuda.so.1 on
// first use; without a driver, available() is false with a reason and the UCX side still works.
import { native } from './native.ts';
import { checkDevice, driver } from './cuda-driver.ts';
import { checkSize, checkU64, describe, invalid } from './ucx/check.ts';

export interface CudaDeviceInfo { index: number; name: string; totalMemory: number; pciBusId: string;
  computeCapability: string; uuid: string }

function checkPointer(value: unknown, name: string): bigint {
  if (checkU64(value, name) === 0n) throw invalid(`${name} must not be a null pointer`);
  return value as bigint;
}

function checkCopyTarget(value: unknown, name: string, bytes: number): void {
  if (typeof value === 'bigint') {
    checkPointer(value, name);
  } else if (ArrayBuffer.isView(value)) {
    if (value.byteLength < bytes) throw invalid(`${name} has ${value.byteLength} bytes, fewer than ${bytes}`);
  } else {
    throw invalid(`${name} must be a device pointer (bigint) or an ArrayBufferView, got ${describe(value)}`);
  }
}

/** The CUDA driver API through the addon; every call runs in the device's primary context. */
export const cuda = {
  available(): boolean {
    return native().cuda.available();
  },
  /** Why CUDA is unavailable, e.g. "libcuda.so.1: cannot open shared object file". */
  unavailableReason(): string | undefined {
    return native().cuda.unavailableReason();
  },
  driverVersion(): number {
    return driver().driverVersion();
  },
  deviceCount(): number {
    return native().cuda.deviceCount();
  },
  device(index: number): CudaDeviceInfo {
    return driver().device(checkDevice(index, 'index'));
  },
  canAccessPeer(a: number, b: number): boolean {
    return driver().canAccessPeer(checkDevice(a, 'a'), checkDevice(b, 'b'));
  },
  memInfo(device: number): { free: number; total: number } {
    return driver().memInfo(checkDevice(device));
  },
  /** cuMemAlloc in the device's primary context. */
  alloc(device: number, bytes: number): bigint {
    checkDevice(device);
    if (checkSize(bytes, 'bytes') === 0) throw invalid('bytes must be > 0');
    return driver().alloc(device, bytes);
  },
  free(ptr: bigint): void {
    driver().free(checkPointer(ptr, 'ptr'));
  },
  /** Pinned host memory (cuMemHostAlloc), freed when the ArrayBuffer is collected. */
  allocHost(bytes: number): ArrayBuffer {
    if (checkSize(bytes, 'bytes') === 0) throw invalid('bytes must be > 0');
    return driver().allocHost(bytes);
  },
  /** cuMemcpy (unified addressing): any mix of device pointers and host views; synchronous. */
  copy(dst: bigint | ArrayBufferView, src: bigint | ArrayBufferView, bytes: number): void {
    checkSize(bytes, 'bytes');
    checkCopyTarget(dst, 'dst', bytes);
    checkCopyTarget(src, 'src', bytes);
    if (bytes === 0) return;
    driver().copy(dst, src, bytes);
  },
  /** Sets `bytes` bytes at `ptr` to `byte`; synchronous. */
  memset(ptr: bigint, byte: number, bytes: number): void {
    checkPointer(ptr, 'ptr');
    if (typeof byte !== 'number' || !Number.isInteger(byte) || byte < 0 || byte > 255) {
      throw invalid(`byte must be an integer in [0, 255], got ${describe(byte)}`);
    }
    if (checkSize(bytes, 'bytes') === 0) return;
    driver().memset(ptr, byte, bytes);
  },
  pointerInfo(ptr: bigint): { memoryType: 'host' | 'cuda' | 'unregistered'; device: number } {
    return driver().pointerInfo(checkU64(ptr, 'ptr'));
  },
  synchronize(device: number): void {
    driver().synchronize(checkDevice(device));
  },
};
