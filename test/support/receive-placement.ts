// Where a side of the GPU tests and benchmarks receives its tensors. Their schemas place tensors
// with a bare `@cuda`, which lands on the receiving side's `device` option; a side that runs in
// host memory (the GPU suite's dry run, the benchmarks' host rows, a test's host-memory caller)
// cannot say so through that option, and on a machine with a GPU a bare `@cuda` would still land
// on cuda:0. So such a side uses a copy of the generated descriptor with those tensors on @host.
import type { MethodDescriptor, Placement, ServiceDescriptor, TypeRef, TypeTable } from '../../core/schema/descriptor.ts';
import type { CudaDevice } from '../../core/rpc/call/placement.ts';
import type { Device } from '../../core/tensor/index.ts';

/** The `device` option (Client.connect, Server.register) that puts a bare `@cuda` on `device`. */
export function receiveOn(device: Device): { device?: CudaDevice } {
  return device === 'cpu' ? {} : { device };
}

/** A service with the method names of S, whose placements may differ from S's. */
export type Placed<S extends ServiceDescriptor> = ServiceDescriptor & { methods: { [M in keyof S['methods']]: MethodDescriptor } };

/** `service` as a side receiving on `device` uses it: unchanged for a GPU, bare `@cuda` moved to `@host` for 'cpu'. */
export function receivingOn<S extends ServiceDescriptor>(service: S, device: Device): Placed<S> {
  if (device !== 'cpu') return service as Placed<S>;
  const methods = Object.fromEntries(Object.entries(service.methods).map(([name, method]) =>
    [name, { ...method, args: method.args.map(onHost), results: method.results.map(onHost), ...(method.types !== undefined ? { types: typesOnHost(method.types) } : {}) }]));
  return { ...service, methods } as Placed<S>;
}

function typesOnHost(types: TypeTable): TypeTable {
  return Object.fromEntries(Object.entries(types).map(([name, type]) => [name, type.kind === 'struct' ? { ...type, fields: type.fields.map(onHost) } : type]));
}

function onHost<F extends { type: TypeRef }>(field: F): F {
  return { ...field, type: typeOnHost(field.type) };
}

function typeOnHost(type: TypeRef): TypeRef {
  switch (type.kind) {
    case 'tensor': return { ...type, placement: placementOnHost(type.placement) };
    case 'list': return { ...type, element: typeOnHost(type.element) };
    case 'map': return { ...type, value: typeOnHost(type.value) };
    case 'optional': return { ...type, inner: typeOnHost(type.inner) };
    default: return type;
  }
}

function placementOnHost(placement: Placement): Placement {
  return placement.kind === 'cuda' && placement.device === undefined ? { kind: 'host' } : placement;
}
