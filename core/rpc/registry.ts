// Struct and enum declarations by service name. Method descriptors name their service but do not
// carry its types, which encoding needs to find tensors inside structs; every service a Server
// registers or a client registers with registerService() is remembered here.
import type { ServiceDescriptor } from '../schema/descriptor.ts';

const services = new Map<string, ServiceDescriptor>();

/** Makes a service's types known to callers in this process (generated clients call it). */
export function registerService(service: ServiceDescriptor): void {
  services.set(service.name, service);
}

/** The types of service `name` (empty when unknown: only scalars, lists, maps and tensors then). */
export function typesOf(name: string): ServiceDescriptor['types'] {
  return services.get(name)?.types ?? {};
}
