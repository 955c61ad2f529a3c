// The serving side: Server.create, register, listen, graceful shutdown, events.
import { EventEmitter } from 'eventemitter3';
import { Code, GdrpcError } from '../../errors.ts';
import { Tensor, type Device, type TensorPool } from '../../tensor/index.ts';
import { Accept, checkOptions, describeValue } from '../../tensor/options.ts';
import { Listener } from '../../ucx/index.ts';
import { Connection, DEFAULT_INLINE_BYTES, DEFAULT_MAX_AWAITED_TENSORS, DEFAULT_TRANSFER_TIMEOUT_MS } from '../connection/connection.ts';
import type { DType, Placement, ServiceDescriptor } from '../../schema/descriptor.ts';
import { failureText } from './handler-failure.ts';
import { DEFAULT_LIVENESS_MS } from '../connection/liveness.ts';
import { serverAllocationFailed } from '../transfer/memory-errors.ts';
import { cudaReceives } from '../runtime/memory-support.ts';
import { DEFAULT_MAX_TENSOR_BYTES, REGISTER_OPTIONS, SERVER_OPTIONS, type ServerOptions, type RegisterOptions } from '../call/options.ts';
import { DEFAULT_RECEIVE_DEVICE, landingDevice, receiveDeviceIndex, receivingDeviceCount, type CudaDevice } from '../call/placement.ts';
import { ownerDialer } from '../client/client.ts';
import { OWNER_SERVICE } from '../remote/owner-client.ts';
import { ownerMethods } from './owner-methods.ts';
import { DEFAULT_PROCESS_POOL_BYTES } from '../runtime/process-pool.ts';
import { Runtime } from '../runtime/runtime.ts';
import { type AllocationWait, type CallEnvironment, type MethodEntry } from './server-call.ts';
import type { CallContext, Handler } from './handler-context.ts';
import { ServerSession, type SessionHost } from './server-session.ts';
import { methodTypes } from '../call/values.ts';

type Handlers = Record<string, Handler>;

/** ServerOptions.maxCallsPerAddress by default: a quarter of the default maxCalls. Before it, one
 *  address could take every slot of maxCalls (64 connections x 256 calls): 16 peers that each
 *  credited 48 KiB every 5 s kept 256 calls waiting for room each and held 4,081 of the 4,096
 *  slots for as long as they went on (a helper session's review, 2026-12-07). */
export const DEFAULT_MAX_CALLS_PER_ADDRESS = 1024;

/** ServerOptions.maxArgumentBytes by default. Calls in flight hold their decoded arguments until
 *  their handlers return: a REQUEST of up to maxFrameBytes (4 MiB) each, which may decode to many
 *  times its bytes (plain.ts), times maxCalls (4,096), was more than a process's heap; a client
 *  sending large inline arguments to a slow method could run a server out of memory. */
export const DEFAULT_MAX_ARGUMENT_BYTES = 1 << 30;

/** A gdrpc server: services, a listener, the connections and their calls. */
export class Server extends EventEmitter<{ connection: [{ peer: string }]; disconnect: [{ peer: string; reason: GdrpcError }]; error: [GdrpcError] }> {
  readonly #options: Required<Omit<ServerOptions, 'token' | 'busyPollUs' | 'maxPoolBytesPerConnection' | 'poolQueueBytes' | 'device' | 'runtime'>> & { token?: string; busyPollUs?: number | 'adaptive'; maxPoolBytesPerConnection?: number; poolQueueBytes?: number; runtime?: Runtime };
  /** Handlers by service, then method: two lookups of the strings a REQUEST carries, where one
   *  of their concatenation made a string per call (and "a/b" + "c" met "a" + "b/c"). */
  readonly #methods = new Map<string, Map<string, MethodEntry>>();
  readonly #sessions = new Set<ServerSession>();
  readonly #pools = new Map<Device, TensorPool>();
  readonly #perAddress = new Map<string, number>();
  /** Calls in flight (ServerOptions.maxCalls counts them) by peer address. */
  readonly #callsPerAddress = new Map<string, number>();
  /** What the REQUEST bodies of the calls in flight decoded to (plain.ts), for maxArgumentBytes. */
  #argumentWeight = 0;
  /** The runtime listen() attached to; kept after shutdown for handlers still pulling handles. */
  #runtime: Runtime | undefined;
  #listener: Listener | undefined;
  #address: { host: string; port: number } | undefined;
  /** The device a bare `@cuda` argument lands on, unless its service was registered with another. */
  readonly #receiveOn: number;
  #activeCalls = 0;
  #drained: (() => void) | undefined;
  #sessionsGone: (() => void) | undefined;
  #shuttingDown = false;
  readonly #host: SessionHost;

  private constructor(options: ServerOptions) {
    super();
    checkOptions('ServerOptions', options, SERVER_OPTIONS);
    if (options.requireClientAddress === true && options.token === undefined) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, 'ServerOptions.requireClientAddress applies to the proofs of a token: give `token` too');
    }
    this.#receiveOn = receiveDeviceIndex('ServerOptions.device', options.device, receivingDeviceCount()) ?? DEFAULT_RECEIVE_DEVICE;
    this.#options = {
      maxCallsPerConnection: 256, maxCalls: 4096, maxCallsPerAddress: DEFAULT_MAX_CALLS_PER_ADDRESS, maxArgumentBytes: DEFAULT_MAX_ARGUMENT_BYTES, maxFrameBytes: 4 << 20, maxTensorBytes: DEFAULT_MAX_TENSOR_BYTES, poolBytes: 128 << 20,
      allowPoolOverflow: false, poolWaitMs: 10_000, livenessMs: DEFAULT_LIVENESS_MS, admissionTimeoutMs: 5000, requireClientAddress: false, transferTimeoutMs: DEFAULT_TRANSFER_TIMEOUT_MS, maxConnections: 1024, maxConnectionsPerAddress: 64, maxAwaitedTensors: DEFAULT_MAX_AWAITED_TENSORS, inlineBytes: DEFAULT_INLINE_BYTES, exposureHoldMs: 30_000, exposeErrorMessages: false, directPulls: false, ...options,
    };
    this.#serve(OWNER_SERVICE, ownerMethods({ lookup: (x, secret) => this.#runtime!.owner.lookup(x, secret), claim: (x, secret) => this.#runtime!.owner.claim(x, secret), staging: (device) => this.#runtime!.pool(device, { bytes: DEFAULT_PROCESS_POOL_BYTES, allowOverflow: true }), copyBlocks: (bytes, copies, options) => this.#runtime!.blocks.copy(bytes, copies, options), directPulls: this.#options.directPulls }));
    this.#host = this.#makeHost();
  }

  /** Serves `service` with `entries`, all at once. */
  #serve(service: string, entries: readonly MethodEntry[]): void {
    this.#methods.set(service, new Map(entries.map((entry) => [entry.method.name, entry])));
  }

  /** A server with these limits; nothing is opened until listen(). */
  static create(options: ServerOptions = {}): Server {
    return new Server(options);
  }

  /** Serves `service` with `handlers` (one per method name). */
  register(service: ServiceDescriptor, handlers: Handlers, options?: RegisterOptions): this {
    if (typeof service !== 'object' || service === null || typeof service.name !== 'string' || typeof service.methods !== 'object' || service.methods === null) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `Server.register: expected a service descriptor (the generated ...Descriptor), got ${describeValue(service)}`);
    }
    if (typeof handlers !== 'object' || handlers === null) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `Server.register(${service.name}): expected an object of handlers by method name, got ${describeValue(handlers)}`);
    }
    const owner = `Server.register(${service.name}) options`;
    checkOptions(owner, options, REGISTER_OPTIONS);
    const receiveOn = receiveDeviceIndex(`${owner}.device`, options?.device, receivingDeviceCount());
    // A second register of a name would replace the first's handlers while its calls run (and
    // gdrpc.Owner's would hand remote tensors to whoever registered it).
    if (this.#methods.has(service.name)) {
      throw new GdrpcError(Code.FAILED_PRECONDITION, `Server.register: ${service.name} is already served by this server${service.name === OWNER_SERVICE ? ' (the service of remote tensors)' : ''}`);
    }
    // Everything is checked before anything is served: a register that throws serves nothing.
    const missing = Object.keys(service.methods).filter((name) => typeof handlers[name] !== 'function');
    if (missing.length > 0) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `no handler for ${missing.map((name) => `${service.name}/${name}`).join(', ')}`, { details: { missing } });
    }
    const entries: MethodEntry[] = [];
    for (const [name, method] of Object.entries(service.methods)) {
      entries.push({ method, handler: handlers[name]!, types: methodTypes(method), receiveOn });
    }
    for (const name of Object.keys(handlers)) {
      if (service.methods[name] === undefined) throw new GdrpcError(Code.INVALID_ARGUMENT, `${service.name} has no method ${name}`);
    }
    this.#serve(service.name, entries);
    return this;
  }

  /** Starts listening (port 0: any free port); resolves to the bound address. */
  async listen(options: { host?: string; port?: number } = {}): Promise<{ host: string; port: number }> {
    return this.bind(options);
  }

  /** listen(), synchronously: for the owner of remote tensors, which needs an address at once. */
  bind(options: { host?: string; port?: number } = {}): { host: string; port: number } {
    // Shut down first: a server that listened and was shut down keeps its listener object.
    if (this.#shuttingDown) throw new GdrpcError(Code.FAILED_PRECONDITION, 'server has been shut down');
    if (this.#listener !== undefined) throw new GdrpcError(Code.FAILED_PRECONDITION, 'server is already listening');
    const runtime = this.#options.runtime ?? Runtime.default(this.#options.busyPollUs !== undefined ? { busyPollUs: this.#options.busyPollUs } : {});
    runtime.attach(this, () => this.shutdown({ graceMs: 0 }));
    this.#runtime = runtime;
    runtime.dispatcher.ensureFrameBytes(this.#options.maxFrameBytes);
    const listener = Listener.create(runtime.worker, {
      host: options.host ?? '0.0.0.0', port: options.port ?? 0,
      accept: ({ clientAddress }) => this.#admissible(clientAddress) === undefined,
    });
    listener.on('connection', (endpoint) => this.#accept(runtime, endpoint));
    listener.on('error', (error) => this.emit('error', error));
    this.#listener = listener;
    this.#address = { host: listener.host, port: listener.port };
    runtime.owner.listening(this, true);
    return this.#address;
  }

  /** The bound address, once listening. */
  get address(): { host: string; port: number } | undefined { return this.#address; }
  /** Calls in flight, and handlers still running past their call's end (ServerOptions.maxCalls
   *  counts both). */
  get activeCalls(): number { return this.#activeCalls; }
  /** Pool statistics per device (for leak checks). */
  poolStats(): Array<ReturnType<TensorPool['stats']>> { return [...this.#pools.values()].map((pool) => pool.stats()); }

  /** Stops accepting, lets calls in flight finish for up to graceMs (default 5000), aborts the
   *  rest (UNAVAILABLE), closes connections, pools and the listener. What is left of graceMs once
   *  the calls ended (2 s at least each) is what clients get to read their last answers and close
   *  their connections, then what their graceful closes get to flush. A second call (another
   *  path of teardown, the runtime's close) answers the same promise, settled when the shutdown
   *  is done; a shorter graceMs there shortens every wait still to come or under way. */
  shutdown(options: { graceMs?: number } = {}): Promise<void> {
    try {
      checkOptions('Server.shutdown options', options, { graceMs: Accept.ms });
    } catch (error) {
      return Promise.reject(error);
    }
    const graceEnds = performance.now() + (options.graceMs ?? 5000);
    if (this.#shutdown !== undefined) {
      if (graceEnds < this.#graceEnds) {
        this.#graceEnds = graceEnds;
        this.#hurry?.();
      }
      return this.#shutdown;
    }
    this.#graceEnds = graceEnds;
    this.#shutdown = this.#shutDown();
    return this.#shutdown;
  }

  /** The shutdown under way (shutdown() answers it to every caller). */
  #shutdown: Promise<void> | undefined;
  /** When the grace time ends (performance.now()); a later shutdown() may bring it closer. */
  #graceEnds = 0;
  /** Wakes the shutdown's wait under way to measure it again against a closer #graceEnds. */
  #hurry: (() => void) | undefined;

  /** Waits until `done` is called (`ends` hands it over), or until `floorMs` from now or the end
   *  of the grace time, whichever is later, has passed; a shorter grace time given meanwhile
   *  shortens it. An unref'd wait does not keep the process alive. */
  async #graceWait(floorMs: number, ends: (done: () => void) => void, unref: boolean): Promise<void> {
    const floorEnds = performance.now() + floorMs;
    let finished = false;
    let wake: (() => void) | undefined;
    ends(() => {
      finished = true;
      wake?.();
    });
    while (!finished) {
      const left = Math.max(floorEnds, this.#graceEnds) - performance.now();
      if (left <= 0) break;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        if (unref) timer.unref();
        wake = () => { clearTimeout(timer); resolve(); };
        this.#hurry = wake;
      });
      wake = undefined;
      this.#hurry = undefined;
    }
  }

  async #shutDown(): Promise<void> {
    this.#shuttingDown = true;
    const runtime = this.#runtime;
    runtime?.owner.listening(this, false);
    if (runtime?.owner.dedicated === this) runtime.owner.dedicated = undefined;
    this.#listener?.close();
    for (const session of this.#sessions) session.goAway();
    // Until the calls end or the grace time does, whichever first.
    if (this.#activeCalls > 0) {
      await this.#graceWait(0, (done) => { this.#drained = done; }, false);
      this.#drained = undefined;
    }
    const stop = new GdrpcError(Code.UNAVAILABLE, 'server shut down');
    for (const session of this.#sessions) for (const call of session.calls.values()) call.scope.abort(stop);
    // Give aborted calls a moment to send their ERROR before the connections go.
    if (this.#activeCalls > 0) await new Promise((resolve) => setTimeout(resolve, 50));
    // A client closes a drained connection itself once it has read the last response there.
    // Waiting for that (bounded) instead of closing first keeps the last responses from being cut
    // off: UCX's flush over TCP is local, and a socket closed with unread input sends a reset. A
    // client whose process is busy reads them late: until 2026-12-07 one busy for 4.5 s right
    // after its calls lost 7 of 8 answers whatever graceMs said (a helper session's review).
    if (this.#sessions.size > 0) {
      await this.#graceWait(CLIENT_CLOSE_WAIT_MS, (done) => { this.#sessionsGone = done; }, true);
      this.#sessionsGone = undefined;
    }
    const sessions = [...this.#sessions];
    for (const session of sessions) session.connection.close(stop, { graceful: true });
    // Let graceful closes flush the last responses before the worker closes what is left by
    // force (a process that exits right after shutdown() otherwise cut them off: reset).
    const flushed = Promise.allSettled(sessions.map((session) => session.connection.endpointClosed));
    await this.#graceWait(CLOSE_FLUSH_MS, (done) => { void flushed.then(done); }, true);
    for (const pool of this.#pools.values()) pool.close({ force: true });
    this.#pools.clear();
    await runtime?.detach(this);
  }

  /** Why a new connection from `address` is refused (connection limits), or undefined. */
  #admissible(address: string): string | undefined {
    if (this.#shuttingDown) return 'the server is shutting down';
    if (this.#sessions.size >= this.#options.maxConnections) return `${this.#sessions.size} connections open (maxConnections)`;
    const fromAddress = this.#perAddress.get(address) ?? 0;
    if (fromAddress >= this.#options.maxConnectionsPerAddress) return `${fromAddress} connections open from ${address} (maxConnectionsPerAddress)`;
    return undefined;
  }

  #accept(runtime: Runtime, endpoint: ConstructorParameters<typeof Connection>[1]): void {
    const address = hostOf(endpoint.peer);
    // The listener's accept hook refused most; connections accepted meanwhile are counted here.
    const refusal = this.#admissible(address);
    if (refusal !== undefined) {
      this.emit('error', new GdrpcError(Code.RESOURCE_EXHAUSTED, `refused a connection from ${endpoint.peer}: ${refusal}`));
      void endpoint.close({ force: true }).catch(() => {});
      return;
    }
    this.#perAddress.set(address, (this.#perAddress.get(address) ?? 0) + 1);
    const connection = new Connection(runtime, endpoint, this.#options.livenessMs);
    connection.transferTimeoutMs = this.#options.transferTimeoutMs;
    const session = new ServerSession(connection, this.#host);
    this.#sessions.add(session);
  }

  /** What this process dropped from peers: control messages under keys of no connection, tensor
   *  payloads nobody received, and control messages given up on because their rest did not come
   *  within a second while others waited (`partial`) (monitoring; a steady rise means someone is
   *  probing). */
  dropped(): { messages: number; payloads: number; partial: number } {
    const stats = this.#runtime?.dispatcher.stats();
    return { messages: stats?.unattributed ?? 0, payloads: stats?.droppedPayloads ?? 0, partial: stats?.stalledReceives ?? 0 };
  }

  /** Connections open and counted against the limits (tests, monitoring). */
  get connectionCount(): number { return this.#sessions.size; }

  #makeHost(): SessionHost {
    const server = this;
    return {
      get token() { return server.#options.token; },
      get requireClientAddress() { return server.#options.requireClientAddress; },
      get livenessMs() { return server.#options.livenessMs; },
      get admissionTimeoutMs() { return server.#options.admissionTimeoutMs; },
      get shuttingDown() { return server.#shuttingDown; },
      limits: {
        maxFrame: this.#options.maxFrameBytes, maxTensor: this.#options.maxTensorBytes, inline: this.#options.inlineBytes, perConnection: this.#options.maxCallsPerConnection,
        poolBytesPerConnection: this.#options.maxPoolBytesPerConnection ?? Math.max(1, Math.floor(this.#options.poolBytes / 2)),
      },
      env: this.#callEnvironment(),
      lookup: (service, method) => server.#methods.get(service)?.get(method),
      acquireCall: (peer, weight) => server.#acquireCall(peer, weight),
      releaseCall: (peer, weight) => server.#releaseCall(peer, weight),
      ready: (session) => server.emit('connection', { peer: session.peer }),
      closed: (session, reason) => {
        if (!server.#sessions.delete(session)) return;
        if (server.#sessions.size === 0) server.#sessionsGone?.();
        const address = hostOf(session.peer);
        const left = (server.#perAddress.get(address) ?? 1) - 1;
        if (left > 0) server.#perAddress.set(address, left);
        else server.#perAddress.delete(address);
        if (session.admitted) server.emit('disconnect', { peer: session.peer, reason });
      },
      error: (error) => server.emit('error', error),
    };
  }

  /** What the calls of every connection share: allocation, limits, handler error reports. */
  #callEnvironment(): CallEnvironment {
    const server = this;
    return {
      allocate: (shape, dtype, placement, wait, field, countAs) => server.#allocate(shape, dtype, placement, wait, field, countAs),
      maxTensor: this.#options.maxTensorBytes,
      exposureHoldMs: this.#options.exposureHoldMs,
      exposeErrorMessages: this.#options.exposeErrorMessages,
      dialOwner: (owner, token, limits) => ownerDialer(server.#runtime!)(owner, token, limits),
      awaited: { now: 0, limit: this.#options.maxAwaitedTensors },
      // Never silent: a handler's bug goes to stderr when the application does not listen. A
      // listener that throws must not take the call (and the process) down with it.
      reportHandlerError: (report) => {
        if (server.listenerCount('error') === 0) {
          process.stderr.write(failureText(report));
          return;
        }
        try {
          server.emit('error', report);
        } catch (listenerError) {
          process.stderr.write(`${failureText(report)}gdrpc server: and the 'error' listener threw: ${String((listenerError as Error)?.stack ?? listenerError)}\n`);
        }
      },
    };
  }

  /** Takes a slot of the server's call limits for a call from `peer` (SessionHost.acquireCall). */
  #acquireCall(peer: string, weight: number): GdrpcError | undefined {
    if (this.#activeCalls >= this.#options.maxCalls) {
      return new GdrpcError(Code.RESOURCE_EXHAUSTED, 'server is at its concurrent call limit (ServerOptions.maxCalls)', { details: { retryable: true, limit: 'maxCalls' } });
    }
    // One call alone is always taken: its REQUEST is bounded by maxFrameBytes.
    if (this.#argumentWeight > 0 && this.#argumentWeight + weight > this.#options.maxArgumentBytes) {
      return new GdrpcError(Code.RESOURCE_EXHAUSTED, `the calls in flight hold ${this.#argumentWeight} bytes of decoded arguments, and this one's would take them past ServerOptions.maxArgumentBytes (${this.#options.maxArgumentBytes})`, { details: { retryable: true, limit: 'maxArgumentBytes' } });
    }
    const address = hostOf(peer);
    const fromAddress = this.#callsPerAddress.get(address) ?? 0;
    if (fromAddress >= this.#options.maxCallsPerAddress) {
      return new GdrpcError(Code.RESOURCE_EXHAUSTED, `${fromAddress} calls in flight from ${address} (ServerOptions.maxCallsPerAddress)`, { details: { retryable: true, limit: 'maxCallsPerAddress' } });
    }
    this.#activeCalls += 1;
    this.#argumentWeight += weight;
    this.#callsPerAddress.set(address, fromAddress + 1);
    return undefined;
  }

  /** Gives back what #acquireCall took; the last call out ends shutdown's wait for calls. */
  #releaseCall(peer: string, weight: number): void {
    this.#activeCalls -= 1;
    this.#argumentWeight -= weight;
    const address = hostOf(peer);
    const left = (this.#callsPerAddress.get(address) ?? 1) - 1;
    if (left > 0) this.#callsPerAddress.set(address, left);
    else this.#callsPerAddress.delete(address);
    if (this.#activeCalls === 0) this.#drained?.();
  }

  #allocate(shape: number[], dtype: DType, placement: Placement, wait: AllocationWait, field: string, countAs?: number): Tensor | Promise<Tensor> {
    const device = landingDevice(placement, this.#receiveOn, cudaReceives());
    const failed = (error: unknown): never => { throw serverAllocationFailed(error, field, this.#options); };
    if (this.#options.poolBytes === 0) {
      try {
        return Tensor.empty(shape, dtype, { device });
      } catch (error) {
        return failed(error);
      }
    }
    let pool = this.#pools.get(device);
    if (pool === undefined) {
      // The runtime makes and tracks it like every pool; sizing and overflow stay this server's own.
      pool = this.#runtime!.createPool({ device, bytes: this.#options.poolBytes, allowOverflow: this.#options.allowPoolOverflow });
      this.#pools.set(device, pool);
    }
    // Say whose memory ran out and what to change: the caller sees this message.
    const maxQueuedBytes = this.#options.poolQueueBytes ?? this.#options.poolBytes;
    // Served at once in the common case, without the call's AbortSignal (made only for a wait).
    if (!wait.scope.aborted) {
      try {
        const now = pool.allocateIfFree(shape, dtype, wait.share);
        if (now !== undefined) return now;
      } catch (error) {
        return failed(error);
      }
    }
    return pool.allocateWhenFree(shape, dtype, { maxWaitMs: this.#options.poolWaitMs, signal: wait.scope.signal, share: wait.share, maxQueuedBytes, countAs }).catch(failed);
  }
}

/** How long shutdown waits at least for drained clients to close their connections themselves
 *  (the rest of graceMs where that is longer). */
const CLIENT_CLOSE_WAIT_MS = 2000;
/** How long shutdown waits at least for graceful endpoint closes before the worker forces the
 *  rest (the rest of graceMs where that is longer). */
const CLOSE_FLUSH_MS = 2000;

/** The host part of "host:port" (IPv6 hosts keep their colons). */
function hostOf(peer: string): string {
  const colon = peer.lastIndexOf(':');
  return colon < 0 ? peer : peer.slice(0, colon);
}

/** Serves pulls of the `@remote` tensors of `runtime` (default: the default runtime) on
 *  `host:port` (port 0: any), admitting only peers that prove `token`, for a runtime that has no
 *  listening Server of its own; `directPulls` as in ServerOptions. */
export function serveRemoteTensors(options: { host: string; port?: number; token?: string; runtime?: Runtime; directPulls?: boolean }): { host: string; port: number } {
  if (typeof options?.host !== 'string' || options.host.length === 0) throw new GdrpcError(Code.INVALID_ARGUMENT, 'serveRemoteTensors needs options.host (the address pulls come to)');
  const runtime = options.runtime ?? Runtime.default();
  const current = runtime.owner.dedicated;
  if (current?.address !== undefined) return current.address;
  const server = Server.create({ poolBytes: 0, runtime, ...(options.token !== undefined ? { token: options.token } : {}), ...(options.directPulls !== undefined ? { directPulls: options.directPulls } : {}) });
  runtime.owner.dedicated = server;
  try {
    return server.bind({ host: options.host, port: options.port ?? 0 });
  } catch (error) {
    runtime.owner.dedicated = undefined;
    throw error;
  }
}

/** Stops the server that serveRemoteTensors started on `runtime` (default: the default runtime). */
export async function shutdownOwner(runtime: Runtime | undefined = Runtime.current()): Promise<void> {
  await runtime?.owner.dedicated?.shutdown({ graceMs: 0 });
}

