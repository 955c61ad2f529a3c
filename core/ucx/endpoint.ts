// A connection to one peer (PEER error mode): tag send, RMA, flush, close; and the peer's remote
// keys unpacked for it. A RemoteKey is valid only with its endpoint and the endpoint's RMA takes
// one, so the two share a file rather than import each other.
import { EventEmitter } from 'eventemitter3';
import { Code, GdrpcError } from '../errors.ts';
import { native } from '../native.ts';
import { checkObject, checkPort, checkSignal, checkString, checkU64, describe, invalid, rejecting } from './check.ts';
import { spanTarget, tagTarget, type MemorySpan, type TagBuffer } from './memory.ts';
import type { NativeEndpoint, NativeRemoteKey } from './native-types.ts';
import { checkTagOptions, Worker, type ProtocolReport, type TagOptions } from './worker.ts';

/** A UCP endpoint. Emits 'error' (UNAVAILABLE) when the peer fails, then 'close'. */
export class Endpoint extends EventEmitter<{ error: [GdrpcError]; close: [] }> {
  readonly worker: Worker;
  /** "host:port" of the other side. */
  readonly peer: string;
  readonly #native: NativeEndpoint;
  #closing: Promise<void> | undefined;
  #ended = false;
  /** close() was called without force on a usable endpoint: UCX flushes towards the peer first. */
  #graceful = false;

  /** @internal Wraps a native endpoint (client side: connect(); server side: Listener). */
  constructor(worker: Worker, handle: NativeEndpoint) {
    super();
    this.worker = worker;
    this.#native = handle;
    this.peer = handle.peer;
    handle.setHandler((kind, value) => {
      if (kind === 'error') {
        this.emit('error', GdrpcError.from(value, Code.UNAVAILABLE));
      } else {
        this.#ended = true;
        Worker.release(worker, this);
        // A listener that throws surfaces as an uncaught exception, as one run from the wake-up's
        // settling does: a close UCX finished inside its call (forced) emits from inside close(),
        // where the throw would have become close()'s rejection and cut the binding's close short.
        try {
          this.emit('close');
        } catch (error) {
          process.nextTick(() => { throw error; });
        }
      }
    });
    Worker.adopt(worker, this);
  }

  /** Client side: ucp_ep_create with a sockaddr; PEER error mode. Connection failures surface as
   *  UNAVAILABLE on operations and as an 'error' event. A host name is resolved here, with a
   *  blocking getaddrinfo: callers on the event loop resolve it first (rpc/connection/resolve.ts)
   *  and pass the name as `label`, which is how `peer` names the endpoint. */
  static connect(worker: Worker, options: { host: string; port: number; name?: string; label?: string }): Endpoint {
    const nativeWorker = Worker.nativeOf(worker);
    checkObject(options, 'options');
    const host = checkString(options.host, 'options.host');
    const port = checkPort(options.port, 'options.port');
    if (port === 0) throw invalid('options.port must not be 0');
    const name = options.name === undefined ? undefined : checkString(options.name, 'options.name');
    const label = options.label === undefined ? undefined : checkString(options.label, 'options.label');
    const endpoint = new Endpoint(worker, new (native().Endpoint)(nativeWorker, host, port, name, label));
    endpoint.#connected = true;
    return endpoint;
  }

  /** Made by connect() (not accepted by a listener). */
  #connected = false;

  /** Whether a listener of this endpoint's own worker accepted its connection (its local address
   *  is the peer of an endpoint that listener accepted). */
  #ownWorkerPeer(): boolean {
    const local = this.#native.failed ? undefined : this.localAddress();
    return local !== undefined && Worker.acceptedPeers(this.worker).has(local);
  }

  /** A graceful close is under way: it ends when UCX has flushed what was sent towards the peer,
   *  which a peer that stopped reading never lets happen; a later close({ force: true }) waits for
   *  it too (UCX closes an endpoint once), and Worker.close ends it. */
  get closingGracefully(): boolean {
    return this.#graceful && !this.#ended;
  }

  /** The error callback fired (the peer is gone or the transport failed). */
  get failed(): boolean {
    return this.#native.failed;
  }

  /** close() was called, or the endpoint closed itself after failing. */
  get closed(): boolean {
    return this.#closing !== undefined || this.#ended;
  }

  /** Tag-sends `src`; with `describe`, resolves to UCX's report of the protocol. */
  tagSend(tag: bigint, src: TagBuffer, options: TagOptions & { describe: true }): Promise<ProtocolReport>;
  tagSend(tag: bigint, src: TagBuffer, options: TagOptions & { describe: boolean }): Promise<ProtocolReport | void>;
  tagSend(tag: bigint, src: TagBuffer, options?: TagOptions): Promise<void>;
  tagSend(tag: bigint, src: TagBuffer, options: TagOptions = {}): Promise<ProtocolReport | void> {
    return rejecting(() => {
      this.#checkUsable();
      checkU64(tag, 'tag');
      const { target, offset, length } = tagTarget(src, 'src');
      const { signal, untilComplete, describe } = checkTagOptions(options);
      return this.worker.track(signal, (id, completed) => this.#native.tagSend(tag, target, offset, length, id, completed, describe), untilComplete);
    });
  }

  /** @internal tagSend for a message whose completion nobody needs to see when UCX sent it at
   *  once (a connection's control messages): undefined then, and `src` may be reused; otherwise
   *  the promise tagSend would return. Makes no promise for the common small message. */
  tagSendNow(tag: bigint, src: Uint8Array): Promise<void> | undefined {
    try {
      // A failed endpoint is the addon's to refuse (UNAVAILABLE, with UCX's reason): asking it
      // first, as #checkUsable does, cost a crossing into the addon per control message.
      if (this.#closing !== undefined || this.#ended) this.#checkUsable();
      checkU64(tag, 'tag');
      if (!(src instanceof Uint8Array)) throw invalid(`src must be a Uint8Array, got ${describe(src)}`);
      return this.#native.tagSend(tag, src, 0, src.byteLength, this.worker.requestId(), undefined, false, true);
    } catch (error) {
      return Promise.reject(GdrpcError.from(error));
    }
  }

  /** RMA write of `src` to the peer's `remoteAddress` (inside the region `rkey` was packed from). */
  put(src: MemorySpan, remoteAddress: bigint, rkey: RemoteKey, options: { describe: true }): Promise<ProtocolReport>;
  put(src: MemorySpan, remoteAddress: bigint, rkey: RemoteKey, options?: { describe?: boolean }): Promise<void>;
  put(src: MemorySpan, remoteAddress: bigint, rkey: RemoteKey, options: { describe?: boolean } = {}): Promise<ProtocolReport | void> {
    return this.#rma('put', src, remoteAddress, rkey, options);
  }

  /** RMA read from the peer's `remoteAddress` into `dst`; `describe` as for tagSend. */
  get(dst: MemorySpan, remoteAddress: bigint, rkey: RemoteKey, options: { describe: true }): Promise<ProtocolReport>;
  get(dst: MemorySpan, remoteAddress: bigint, rkey: RemoteKey, options: { describe: boolean }): Promise<ProtocolReport | void>;
  get(dst: MemorySpan, remoteAddress: bigint, rkey: RemoteKey, options?: { describe?: boolean }): Promise<void>;
  get(dst: MemorySpan, remoteAddress: bigint, rkey: RemoteKey, options: { describe?: boolean } = {}): Promise<ProtocolReport | void> {
    return this.#rma('get', dst, remoteAddress, rkey, options);
  }

  /** Completes when every operation issued before it has completed at the peer. */
  flush(): Promise<void> {
    return rejecting(() => {
      this.#checkUsable();
      return this.worker.track(undefined, (id) => this.#native.flush(id));
    });
  }

  /** Transports of this endpoint's lanes (ucp_ep_query UCP_EP_ATTR_FIELD_TRANSPORTS). */
  transports(): Array<{ transport: string; device: string }> {
    this.#checkUsable();
    return this.#native.transports();
  }

  /** This side's "address:port" on a connection it made to a listener: what the server's
   *  connection request shows, written as the server's endpoint writes its `peer` (ucp_ep_query
   *  UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR); undefined where UCX cannot tell. */
  localAddress(): string | undefined {
    this.#checkUsable();
    return this.#native.localAddress();
  }

  /** The port of localAddress(). */
  localPort(): number | undefined {
    const address = this.localAddress();
    return address === undefined ? undefined : portOf(address);
  }

  /** Graceful close (flush) unless the endpoint failed or force is set; pending requests reject
   *  with CANCELLED (or UNAVAILABLE if the endpoint failed). Safe to call twice. */
  close(options: { force?: boolean } = {}): Promise<void> {
    if (this.#closing) return this.#closing;
    return rejecting(() => {
      const force = checkObject(options, 'options').force ?? false;
      if (typeof force !== 'boolean') throw invalid(`options.force must be a boolean, got ${describe(force)}`);
      this.#graceful = !force && !this.#native.failed;
      // UCX 1.22 leaves the TCP lanes of an endpoint connected to its own worker open after a
      // graceful close (3 sockets a connection, until the worker closes: a process that called
      // a server of its own runtime ran out of descriptors), not after a forced one. Such an
      // endpoint (one of the worker's listeners accepted a connection from its local address) is
      // flushed (what was sent arrives, as a graceful close would see to), then closed with force.
      const own = this.#graceful && this.#connected && this.#ownWorkerPeer();
      const closing = own ? this.flush().catch(() => {}).then(() => this.#native.close(true)) : this.#native.close(force);
      this.#closing = closing.then(() => {
        this.#ended = true;
        Worker.release(this.worker, this);
      });
      return this.#closing;
    });
  }

  #rma(op: 'put' | 'get', span: MemorySpan, remoteAddress: bigint, rkey: RemoteKey, options: { describe?: boolean }): Promise<ProtocolReport | void> {
    return rejecting(() => {
      this.#checkUsable();
      const { target, offset, length } = spanTarget(span, op === 'put' ? 'src' : 'dst');
      checkU64(remoteAddress, 'remoteAddress');
      const nativeKey: NativeRemoteKey = RemoteKey.nativeOf(rkey, this);
      const { describe } = checkTagOptions(options);
      return this.worker.track(undefined, (id) => this.#native[op](target, offset, length, remoteAddress, nativeKey, id, describe));
    });
  }

  #checkUsable(): void {
    if (this.#closing) throw new GdrpcError(Code.FAILED_PRECONDITION, `the endpoint to ${this.peer} is closed`);
    if (this.#native.failed || this.#ended) {
      throw new GdrpcError(Code.UNAVAILABLE, `the endpoint to ${this.peer} failed`);
    }
  }

  /** @internal The native endpoint of a usable Endpoint (for RemoteKey.unpack). */
  static nativeOf(endpoint: unknown, name = 'endpoint'): NativeEndpoint {
    if (!(endpoint instanceof Endpoint)) throw invalid(`${name} must be an Endpoint, got ${describe(endpoint)}`);
    endpoint.#checkUsable();
    return endpoint.#native;
  }
}

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

/** The port of an "address:port" as endpoints name their peers and themselves (`peer`,
 *  localAddress()), or undefined when it names none from 1 to 65535. */
export function portOf(address: string): number | undefined {
  const port = Number(address.slice(address.lastIndexOf(':') + 1));
  return Number.isInteger(port) && port > 0 && port <= 0xffff ? port : undefined;
}
