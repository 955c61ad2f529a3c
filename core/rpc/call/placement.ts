// Where a received tensor lands. The schema's placement says host, a CUDA device, or "the
// receiver's device" (a bare `@cuda`); the receiving side's `device` option (ClientOptions,
// ServerOptions, Server.register) says which device that is. core/cuda.ts has no notion of a
// current device (every driver call names its device), so the default is cuda:0.
import { cuda } from '../../cuda.ts';
import { invalidOption } from '../../tensor/options.ts';
import type { Device } from '../../tensor/index.ts';
import type { Placement } from '../../schema/descriptor.ts';
import { cudaReceives } from '../runtime/memory-support.ts';

/** A CUDA device name, as the `device` options take it. */
export type CudaDevice = `cuda:${number}`;

/** Device a bare `@cuda` receives on when no option says otherwise. */
export const DEFAULT_RECEIVE_DEVICE = 0;

/** The device a received tensor of `placement` is allocated on: `@cuda(N)` is absolute, a bare
 *  `@cuda` goes to device `receiveOn`, and any `@cuda` is host memory where `gpu` is false. */
export function landingDevice(placement: Placement, receiveOn: number, gpu: boolean): Device {
  if (placement.kind !== 'cuda' || !gpu) return 'cpu';
  return `cuda:${placement.device ?? receiveOn}`;
}

/** `placement` with a bare `@cuda` bound to device `receiveOn` (unchanged when that is undefined). */
export function bindPlacement(placement: Placement, receiveOn: number | undefined): Placement {
  if (placement.kind !== 'cuda' || placement.device !== undefined || receiveOn === undefined) return placement;
  return { kind: 'cuda', device: receiveOn };
}

/** The index of a checked `device` option (undefined: not given). Past the last device of a
 *  machine with GPUs is INVALID_ARGUMENT naming `option`; without a GPU any index is accepted,
 *  as `@cuda` then receives into host memory anyway. */
export function receiveDeviceIndex(option: string, device: CudaDevice | undefined, deviceCount: number): number | undefined {
  if (device === undefined) return undefined;
  const index = Number(device.slice('cuda:'.length));
  if (deviceCount > 0 && index >= deviceCount) {
    throw invalidOption(option, device, `a CUDA device of this machine, cuda:0 to cuda:${deviceCount - 1}`);
  }
  return index;
}

/** CUDA devices `@cuda` tensors can be received on: 0 where they are received into host memory. */
export function receivingDeviceCount(): number {
  return cudaReceives() ? cuda.deviceCount() : 0;
}
