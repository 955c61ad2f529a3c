// A peer's packed remote key, unpacked for one endpoint.
import { Code, GdrpcError } from '../errors.ts';
import { native } from '../native.ts';
import { describe, invalid } from './check.ts';
import { Endpoint } from './endpoint.ts';
import type { NativeRemoteKey } from './native-types.ts';

/** A remote key (ucp_ep_rkey_unpack) valid with the endpoint it was unpacked for; closed with it. */
export class RemoteKey {
  readonly endpoint: Endpoint;
  readonly #native: NativeRemoteKey;
  #closed = false;

  private constructor(endpoint: Endpoint, handle: NativeRemoteKey) {
    this.endpoint = endpoint;
    this.#native = handle;
  }

  static unpack(endpoint: Endpoint, packed: Uint8Array): RemoteKey {
    const nativeEndpoint = Endpoint.nativeOf(endpoint);
    if (!(packed instanceof Uint8Array) || packed.byteLength === 0) {
      throw invalid(`packed must be a non-empty Uint8Array (from MemoryRegion.packRkey), got ${describe(packed)}`);
    }
    return new RemoteKey(endpoint, new (native().RemoteKey)(nativeEndpoint, packed));
  }

  /** Releases the key (ucp_rkey_destroy). Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#native.close();
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** @internal The native key, checked to belong to `endpoint`. */
  static nativeOf(rkey: unknown, endpoint: Endpoint): NativeRemoteKey {
    if (!(rkey instanceof RemoteKey)) throw invalid(`rkey must be a RemoteKey, got ${describe(rkey)}`);
    if (rkey.#closed) throw new GdrpcError(Code.FAILED_PRECONDITION, 'the remote key is closed');
    if (rkey.endpoint !== endpoint) throw invalid('the remote key was unpacked for another endpoint');
    return rkey.#native;
  }
}
