// How errors and logs name a method: by the short name generated code gives it ("Echo.echo"),
// which is what a user searches their code for, not the routing pair ("gdrpc.echo.v1.Echo/echo").
import type { MethodDescriptor } from '../../schema/descriptor.ts';

/** "Echo.echo" for method echo of service "gdrpc.echo.v1.Echo". */
export function methodName(method: Pick<MethodDescriptor, 'service' | 'name'>): string {
  return `${method.service.slice(method.service.lastIndexOf('.') + 1)}.${method.name}`;
}
