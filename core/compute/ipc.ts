// CUDA IPC mappings: the allocation a GPU tensor lies in, exported by its owner as a 64-byte
// handle, and mapped into another process's context so that its kernels read it directly
// (block-table pulls with `direct`, docs/gpu.md "Direct pulls").
import { checkDevice, driver } from '../cuda-driver.ts';
import type { Tensor } from '../tensor/index.ts';
import { Code, GdrpcError } from '../errors.ts';

/** Bytes of a CUDA IPC handle. */
export const IPC_HANDLE_BYTES = 64;

/** What an owner hands a trusted puller: the handle of the allocation `tensor` lies in, the
 *  tensor's offset in it, and the allocation's size. */
export function exportAllocation(tensor: Tensor): { handle: Uint8Array; offset: number; bytes: number } {
  if (tensor.device === 'cpu') throw new GdrpcError(Code.FAILED_PRECONDITION, 'a host tensor has no CUDA IPC handle');
  const device = checkDevice(Number(tensor.device.slice('cuda:'.length)));
  const { handle, base, bytes } = driver().ipcExport(device, tensor.address);
  return { handle, offset: Number(tensor.address - base), bytes };
}

/** An allocation of another process, mapped here until close(). */
export interface Mapping { readonly device: number; readonly address: bigint; readonly bytes: number; close(): void }

/** Maps `handle` on `device`; close() unmaps it (once, never throwing). The driver counts opens of one handle in
 *  a process (each returns the same address), so users of one allocation map it independently.
 *  Fails as the driver does: a handle of this process, of another node, or already freed. */
export function mapAllocation(device: number, handle: Uint8Array): Mapping {
  if (!(handle instanceof Uint8Array) || handle.byteLength !== IPC_HANDLE_BYTES) {
    throw new GdrpcError(Code.INVALID_ARGUMENT, `a CUDA IPC handle is ${IPC_HANDLE_BYTES} bytes`);
  }
  const { address, bytes } = driver().ipcOpen(checkDevice(device), handle);
  let open = true;
  return {
    device, address, bytes,
    close: () => {
      if (!open) return;
      open = false;
      // Nothing a caller could do about a failed unmap: the mapping is given up either way, and
      // the pull or connection closing it must still finish its own cleanup.
      try {
        driver().ipcClose(device, address);
      } catch {
        // given up
      }
    },
  };
}
