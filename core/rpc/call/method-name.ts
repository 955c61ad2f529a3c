// How errors and logs name a method: by the short name generated code gives it ("Echo.echo"),
// which is what a user searches their code for, not the routing pair ("gdrpc.echo.v1.Echo/echo").
import type { MethodDescriptor } from '../../schema/descriptor.ts';

/** Names already made, per descriptor: every call names its method (labels, messages). */
const names = new WeakMap<object, { service: string; name: string; text: string }>();

/** "Echo.echo" for method echo of service "gdrpc.echo.v1.Echo". */
export function methodName(method: Pick<MethodDescriptor, 'service' | 'name'>): string {
  const known = names.get(method);
  // A descriptor is data a caller could change: the cached name must still be its own.
  if (known !== undefined && known.service === method.service && known.name === method.name) return known.text;
  const text = `${method.service.slice(method.service.lastIndexOf('.') + 1)}.${method.name}`;
  names.set(method, { service: method.service, name: method.name, text });
  return text;
}
