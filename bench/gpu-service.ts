// The service bench/gpu.ts calls: a round trip without tensors and a sink that takes a tensor
// without touching it, so a call's time is the framework plus the transfer. Each process builds
// it for its own device (a placement says where the receiving side wants the tensor).
import type { MethodDescriptor, Placement, ServiceDescriptor } from '../core/schema/descriptor.ts';
import type { CudaDevice } from '../core/rpc/placement.ts';
import type { Device } from '../core/tensor/index.ts';

export const BENCH_SERVICE = 'bench.gpu.v1.Sink';

/** A bare `@cuda` for a GPU: the receiving side's `device` option (receiveOn) says which one. */
export function placementOf(device: Device): Placement {
  return device === 'cpu' ? { kind: 'host' } : { kind: 'cuda' };
}

/** The `device` option (Client.connect, Server.register) that puts a bare `@cuda` on `device`. */
export function receiveOn(device: Device): { device?: CudaDevice } {
  return device === 'cpu' ? {} : { device };
}

/** Sink with its tensor placed on `device`. */
export function benchService(device: Device): ServiceDescriptor {
  const method = (name: string, args: MethodDescriptor['args'], results: MethodDescriptor['results']): MethodDescriptor =>
    ({ name, service: BENCH_SERVICE, args, results, clientStreaming: false, serverStreaming: false });
  const n = { kind: 'scalar', name: 'f64' } as const;
  return {
    name: BENCH_SERVICE,
    methods: {
      ping: method('ping', [{ name: 'n', type: { kind: 'scalar', name: 'u32' } }], [{ name: 'n', type: { kind: 'scalar', name: 'u32' } }]),
      sink: method('sink', [{ name: 'x', type: { kind: 'tensor', dtype: 'u8', shape: [{ kind: 'symbol', name: 'n' }], placement: placementOf(device) } }],
        [{ name: 'n', type: n }]),
    },
  };
}
