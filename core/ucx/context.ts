// The UCP context: one per process in practice; workers and mapped regions hang off it.
import { Code, GdrpcError } from '../errors.ts';
import { applyUcxDefaults, native } from '../native.ts';
import { checkObject, describe, invalid } from './check.ts';
import type { NativeContext } from './native-types.ts';

export type MemoryType = 'host' | 'cuda' | 'cuda-managed' | 'unknown';
export type Feature = 'tag' | 'rma' | 'am' | 'wakeup';

export interface ContextOptions {
  /** UCP features to request; default all four. */
  features?: Feature[];
  /** UCX config overrides applied with ucp_config_modify, e.g. { TLS: 'tcp' }. Keys without UCX_ prefix. */
  config?: Record<string, string>;
}

const FEATURES: readonly Feature[] = ['tag', 'rma', 'am', 'wakeup'];
const MEMORY_TYPES = new Set<string>(['host', 'cuda', 'cuda-managed']);

/** Converts a UCX memory type name to the binding's MemoryType. */
export function toMemoryType(name: string): MemoryType {
  return MEMORY_TYPES.has(name) ? (name as MemoryType) : 'unknown';
}

/** A UCP context (ucp_init): configuration, features, and what UCX found on this machine. */
export class Context {
  readonly #native: NativeContext;

  private constructor(handle: NativeContext) {
    this.#native = handle;
  }

  /** Creates a context; config keys are UCX variables without the UCX_ prefix. */
  static create(options: ContextOptions = {}): Context {
    checkObject(options, 'options');
    const features = options.features ?? [...FEATURES];
    if (!Array.isArray(features) || features.length === 0 || features.some((f) => !FEATURES.includes(f))) {
      throw invalid(`options.features must be a non-empty array of ${FEATURES.join(', ')}, got ${describe(features)}`);
    }
    const config: Record<string, string> = {};
    for (const [key, value] of Object.entries(checkObject(options.config ?? {}, 'options.config'))) {
      if (typeof value !== 'string') throw invalid(`options.config.${key} must be a string, got ${describe(value)}`);
      config[key.startsWith('UCX_') ? key.slice(4) : key] = value;
    }
    const binding = native();
    applyUcxDefaults();
    return new Context(new binding.Context([...new Set(features)], config));
  }

  /** The loaded UCX version, e.g. "1.22.0". */
  get version(): string {
    return native().ucxVersion();
  }

  /** Path of the loaded libucp. */
  get libraryPath(): string {
    return this.#native.libraryPath() ?? 'unknown';
  }

  /** Transports and devices this context can use, from ucp_context_print_info. */
  transports(): Array<{ transport: string; device: string }> {
    this.#checkOpen();
    return this.#native.transports();
  }

  /** Memory types UCX can register (ucp_context_query memory_types). */
  memoryTypes(): MemoryType[] {
    this.#checkOpen();
    return [...new Set(this.#native.memoryTypes().map(toMemoryType))];
  }

  /** Closes the context; FAILED_PRECONDITION while workers or regions are open. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#native.close();
    this.#closed = true;
  }

  get closed(): boolean {
    return this.#closed;
  }

  #closed = false;

  #checkOpen(): void {
    if (this.#closed) throw new GdrpcError(Code.FAILED_PRECONDITION, 'the context is closed');
  }

  /** @internal The native handle, for the binding's other classes. */
  static nativeOf(context: unknown, name = 'context'): NativeContext {
    if (!(context instanceof Context)) throw invalid(`${name} must be a Context, got ${describe(context)}`);
    context.#checkOpen();
    return context.#native;
  }
}
