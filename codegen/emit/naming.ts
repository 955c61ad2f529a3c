// The TypeScript names the emitters give to schema things. Checks use the same functions, so a
// schema whose generated names would collide is rejected before anything is emitted.
import type { IrMethod, IrService } from '../model.ts';

const pascal = (s: string): string => s.charAt(0).toUpperCase() + s.slice(1);

/** The constant that holds a generated module's struct and enum declarations. */
export const MODULE_TYPES = 'types';

/** Names generated for one service. */
export function serviceNames(service: Pick<IrService, 'name'>) {
  const s = service.name;
  return {
    /** The data-only descriptor constant. */
    descriptor: `${s}Descriptor`,
    /** The typed client class. */
    client: `${s}Client`,
    /** The interface a server implements. */
    handlers: `${s}Handlers`,
    /** The namespace-like object with `client()` and `register()`. */
    service: s,
  };
}

/** Names generated for one method's messages and validators. */
export function methodNames(service: Pick<IrService, 'name'>, method: Pick<IrMethod, 'name'>) {
  const base = `${service.name}${pascal(method.name)}`;
  return {
    args: `${base}Args`,
    results: `${base}Results`,
    /** What the receiving side of a call sees when it differs (remote tensors arrive as handles). */
    argsReceived: `${base}ArgsReceived`,
    resultsReceived: `${base}ResultsReceived`,
    validateArgs: `validate${base}Args`,
    validateResults: `validate${base}Results`,
  };
}

/** The receiving-side variant of a struct that holds remote tensors. */
export const receivedName = (struct: string): string => `${struct}Received`;

/** Every name a file's generated module declares besides the schema's own struct and enum names. */
export function generatedNames(services: Array<{ name: string; methods: Array<{ name: string }> }>): string[] {
  const out: string[] = [];
  for (const s of services) {
    out.push(...Object.values(serviceNames(s)));
    for (const m of s.methods) out.push(...Object.values(methodNames(s, m)));
  }
  return out;
}

/** Names the generated module imports from the runtime or uses from the TypeScript library. */
export const RUNTIME_NAMES: ReadonlySet<string> = new Set([
  'Tensor', 'RemoteTensor', 'Client', 'Server', 'CallOptions', 'CallContext', 'ServiceDescriptor', 'TypeTable', 'validateFields',
  'Promise', 'AsyncIterable', 'Iterable', 'Record', 'Uint8Array', 'Array', 'Map', 'Object', 'Error',
]);

/** How a module's line naming its schema file begins: then the schema's path from the module's
 *  directory, as a JSON string (module.ts writes it for `gen`; output.ts reads it). */
export const SCHEMA_LINE = '// @schema ';
