// The caller's side: Client.connect, unary calls (streaming ones in streams.ts, on this client's
// plumbing), deadlines, cancellation, reconnection on the next call after the connection is lost.
import { isIP } from 'node:net';
import { EventEmitter } from 'eventemitter3';
import { Code, GdrpcError } from '../../errors.ts';
import { Tensor, TensorPool, type Device } from '../../tensor/index.ts';
import { checkOptions } from '../../tensor/options.ts';
import { FrameKind, type FrameBody } from '../../wire/frames.ts';
import { attachCallInfo } from '../movers/call-info.ts';
import { checkCall, NO_OPTIONS } from '../call/call-checks.ts';
import { ClientSession, type FinalFrame } from './client-session.ts';
import { callInfoFrom, cancel, neverSent, protocolError, putPolicy, type Sent } from './call-frames.ts';
import { clientStreamCall, serverStreamCall, type CallPlumbing } from './streams.ts';
import { PostedFrame } from '../connection/posted-frame.ts';
import { absoluteDeadline, CallScope } from '../call/deadline.ts';
import type { MethodDescriptor, Placement } from '../../schema/descriptor.ts';
import { connectAndAdmit } from '../connection/handshake.ts';
import { DEFAULT_LIVENESS_MS } from '../connection/liveness.ts';
import { clientAllocationFailed } from '../transfer/memory-errors.ts';
import { methodName } from '../call/method-name.ts';
import { DEFAULT_INLINE_BYTES } from '../connection/connection.ts';
import { cudaReceives } from '../runtime/memory-support.ts';
import { DEFAULT_RECEIVE_DEVICE, landingDevice, receiveDeviceIndex, receivingDeviceCount } from '../call/placement.ts';
import { ALLOCATE, CLIENT_OPTIONS, CONNECT_SIGNAL, NARROW_WINDOW, DEFAULT_MAX_RESULT_BYTES, DEFAULT_MAX_TENSOR_BYTES, type CallOptions, type ClientOptions } from '../call/options.ts';
import { DEFAULT_PROCESS_POOL_BYTES } from '../runtime/process-pool.ts';
import type { OwnerClient, OwnerDialer, PullLimits } from '../remote/owner-client.ts';
import { Runtime } from '../runtime/runtime.ts';
import type { Allocate } from '../transfer/transfer.ts';
import { OutgoingTensors } from '../transfer/outgoing.ts';
import { validateFields } from '../call/validate.ts';
import { receiveResults, type HeldItems, type Received, type ResultLanding } from './results.ts';
import { encodeFields, methodTypes } from '../call/values.ts';

type Row = Record<string, unknown>;
type RequestBody = FrameBody<FrameKind.Request>;

/** Connections a Client keeps draining after GOAWAY (their calls in flight finishing) besides the
 *  one its new calls use; past it the oldest is closed and its calls fail UNAVAILABLE. A server
 *  that answered each call's REQUEST with GOAWAY and nothing else made a client open a
 *  connection per call, all kept open (33 of them took its runtime's whole maxWindowBytes), and
 *  those survived the client's close (a helper session's attack, 2026-12-06). */
export const MAX_DRAINING_CONNECTIONS = 4;

/** A connection to one gdrpc server, re-established on the next call after it is lost. */
export class Client extends EventEmitter<{ disconnect: [GdrpcError]; error: [GdrpcError] }> {
  readonly #runtime: Runtime;
  /** How remote handles in results are pulled (made once: every call's results may carry one). */
  #dialOwner: OwnerDialer | undefined;
  readonly #host: string;
  readonly #port: number;
  /** A pull's connection: the opening window alone (NARROW_WINDOW). */
  readonly #narrowWindow: boolean;
  readonly #options: Required<Omit<ClientOptions, 'token' | 'busyPollUs' | 'device' | 'runtime' | typeof CONNECT_SIGNAL | typeof NARROW_WINDOW>> & { token?: string };
  /** The device a bare `@cuda` result lands on (ClientOptions.device). */
  readonly #receiveOn: number;
  #session: ClientSession | undefined;
  #connecting: Promise<ClientSession> | undefined;
  /** Sessions the server said GOAWAY on whose calls are still finishing, oldest first. */
  #draining: ClientSession[] = [];
  #closed = false;
  /** Aborted by close(): a connect under way gives up at once instead of running to its timeout
   *  (a runtime's close waited 20 s for a handshake its server never answered). */
  readonly #closing = new AbortController();
  /** Only a poolBytes the caller gave grows the process pool; the default does not. */
  readonly #explicitPoolBytes: boolean;

  private constructor(runtime: Runtime, host: string, port: number, options: ClientOptions, receiveOn: number) {
    super();
    this.#explicitPoolBytes = options.poolBytes !== undefined && options.poolBytes > 0;
    this.#narrowWindow = options[NARROW_WINDOW] === true;
    this.#runtime = runtime;
    this.#host = host;
    this.#port = port;
    this.#options = { livenessMs: DEFAULT_LIVENESS_MS, connectTimeoutMs: DEFAULT_CONNECT_TIMEOUT_MS, poolBytes: DEFAULT_PROCESS_POOL_BYTES, inlineBytes: DEFAULT_INLINE_BYTES, maxTensorBytes: DEFAULT_MAX_TENSOR_BYTES, maxResultBytes: DEFAULT_MAX_RESULT_BYTES, ...options };
    this.#receiveOn = receiveOn;
  }

  /** Connects to a server ("host:port" or {host, port}) and completes the handshake. */
  static async connect(address: string | { host: string; port: number }, options: ClientOptions = {}): Promise<Client> {
    checkOptions('ClientOptions', options, CLIENT_OPTIONS);
    const receiveOn = receiveDeviceIndex('ClientOptions.device', options.device, receivingDeviceCount()) ?? DEFAULT_RECEIVE_DEVICE;
    const { host, port } = parseAddress(address);
    // busyPollUs only shapes a default runtime this call creates; a given runtime has its own.
    const runtime = options.runtime ?? Runtime.default(options.busyPollUs !== undefined ? { busyPollUs: options.busyPollUs } : {});
    const client = new Client(runtime, host, port, options, receiveOn);
    runtime.attach(client, () => client.close());
    // Closed while it connected (its runtime's close closes its clients): a client that can make
    // no call is not a connected one, and the connect gave up when the close came.
    const closedMeanwhile = (cause?: unknown): GdrpcError => new GdrpcError(Code.FAILED_PRECONDITION, `the client to ${client.address} was closed while it connected (its runtime closed)`, cause === undefined ? {} : { cause });
    try {
      await client.#connection(options[CONNECT_SIGNAL]);
      if (client.#closed) throw closedMeanwhile();
    } catch (error) {
      const closed = client.#closed;
      await client.close();
      throw closed && !(error instanceof GdrpcError && error.code === Code.FAILED_PRECONDITION) ? closedMeanwhile(error) : error;
    }
    return client;
  }

  /** "host:port" of the server. */
  get address(): string { return `${this.#host}:${this.#port}`; }

  /** One request, one response. A call whose request certainly never reached the server (the
   *  connection was already gone, or the server refused it unrun while shutting down) is tried
   *  once more on a fresh connection, as gRPC does; a call that may have run never is. */
  async unary(method: MethodDescriptor, args: Row, options: CallOptions = NO_OPTIONS): Promise<Row> {
    const started = performance.now();
    checkCall('unary', method, options);
    const types = methodTypes(method);
    validateFields(method.args, args, types, `${methodName(method)} arguments`);
    const scope = new CallScope(absoluteDeadline(options.deadline), options.signal, method);
    try {
      for (let attempt = 1; ; attempt += 1) {
        // A ready session is used as it is: no promise and no race on every call's way out.
        const session = this.#usableSession() ?? await scope.race(this.#connection());
        let sent: Sent | undefined;
        try {
          // Backpressure (room.ts): the request waits, unmade, while the server has not taken
          // what waits for it.
          const entering = session.connection.room.enter(scope);
          if (entering !== undefined) await entering;
          const final = this.#open(session, scope);
          const sending = this.#send(session, final.id, FrameKind.Request, method, args, options, scope, true);
          sent = sending instanceof Promise ? await sending.catch((error: unknown) => { cancel(session, final.id); throw error; }) : sending;
          const result = await final.result;
          if (result.kind !== FrameKind.Response) throw protocolError(session, 'expected RESPONSE');
          const receiving = this.#receive(session, final.id, method, result.body.r, scope, options);
          const received = receiving instanceof Promise ? await receiving : receiving;
          return attachCallInfo(received.values, callInfoFrom(sent.transfers, received.transfers, started));
        } catch (error) {
          if (attempt > 1 || scope.aborted || !(await neverSent(error, sent))) throw error;
        }
      }
    } finally {
      scope.dispose();
    }
  }

  /** One request, a stream of responses (an async iterable; breaking out of it cancels the call). */
  serverStream(method: MethodDescriptor, args: Row, options: CallOptions = NO_OPTIONS): AsyncIterable<Row> {
    return { [Symbol.asyncIterator]: () => serverStreamCall(this.#plumbing, method, args, options)[Symbol.asyncIterator]() };
  }

  /** A stream of requests, one response. */
  clientStream(method: MethodDescriptor, args: AsyncIterable<Row> | Iterable<Row>, options: CallOptions = NO_OPTIONS): Promise<Row> {
    return clientStreamCall(this.#plumbing, method, args, options);
  }

  /** How the streaming calls (streams.ts) use this client: bound to it, made once. */
  readonly #plumbing: CallPlumbing = {
    connection: () => this.#connection(),
    open: (session, scope, onCredit) => this.#open(session, scope, onCredit),
    send: (session, id, kind, method, values, options, scope, awaitTransfers, seq, window) => this.#send(session, id, kind, method, values, options, scope, awaitTransfers, seq, window),
    receive: (session, id, method, wire, scope, options, held) => this.#receive(session, id, method, wire, scope, options, held),
    maxResultBytes: () => this.#options.maxResultBytes,
  };

  /** The runtime's mapped pool on `device` (processPool; at least this client's poolBytes if given): tensors allocated from it are sent without a registration per call and can be
   *  exposed for RMA as they are. Results are received into it. It outlives this client. */
  pool(device: Device = 'cpu'): TensorPool {
    if (this.#closed) throw new GdrpcError(Code.FAILED_PRECONDITION, 'client is closed');
    return this.#runtime.pool(device, { bytes: this.#options.poolBytes || DEFAULT_PROCESS_POOL_BYTES, allowOverflow: true, grow: this.#explicitPoolBytes });
  }

  /** Cancels calls in flight and closes the connection. The runtime's pools stay (see pool()).
   *  Every call answers the same promise, settled once the client is closed. */
  close(): Promise<void> {
    this.#closeDone ??= this.#close();
    return this.#closeDone;
  }

  #closeDone: Promise<void> | undefined;

  async #close(): Promise<void> {
    this.#closed = true;
    this.#closing.abort(new GdrpcError(Code.CANCELLED, 'client closed'));
    // All are this client's: the sessions still draining after a GOAWAY and a reconnect under way.
    const current = this.#session;
    const connecting = await this.#connecting?.catch(() => undefined);
    for (const session of new Set([current, connecting, ...this.#draining])) {
      session?.connection.close(new GdrpcError(Code.CANCELLED, 'client closed'), { graceful: true });
    }
    await this.#runtime.detach(this);
  }

  /** The session calls may use now, if there is one (not closed, connected, not draining). */
  #usableSession(): ClientSession | undefined {
    return !this.#closed && this.#session?.usable === true ? this.#session : undefined;
  }

  /** The ready session, connecting (again) when there is none. */
  #connection(signal?: AbortSignal): Promise<ClientSession> {
    if (this.#closed) return Promise.reject(new GdrpcError(Code.FAILED_PRECONDITION, 'client is closed'));
    const ready = this.#usableSession();
    if (ready !== undefined) return Promise.resolve(ready);
    this.#connecting ??= connectAndAdmit(this.#runtime, this.#host, this.#port, {
      livenessMs: this.#options.livenessMs, timeoutMs: this.#options.connectTimeoutMs,
      ...(this.#options.token !== undefined ? { token: this.#options.token } : {}),
      signal: signal === undefined ? this.#closing.signal : AbortSignal.any([this.#closing.signal, signal]),
      narrowWindow: this.#narrowWindow,
    }).then((connection) => {
      connection.inlineBytes = this.#options.inlineBytes;
      const session = new ClientSession(connection, (error) => {
        if (this.#session === session) this.#session = undefined;
        const draining = this.#draining.indexOf(session);
        if (draining >= 0) this.#draining.splice(draining, 1);
        if (!this.#closed) this.emit('disconnect', error);
      }, (error) => this.emit('error', error), () => this.#drains(session));
      this.#session = session;
      return session;
    }).finally(() => { this.#connecting = undefined; });
    return this.#connecting;
  }

  /** The server said GOAWAY on `session`: its calls finish there, new ones go to a new
   *  connection. Past MAX_DRAINING_CONNECTIONS the oldest draining one is closed. */
  #drains(session: ClientSession): void {
    if (this.#closed) return;
    this.#draining.push(session);
    if (this.#draining.length <= MAX_DRAINING_CONNECTIONS) return;
    const oldest = this.#draining.shift()!;
    oldest.connection.close(new GdrpcError(Code.UNAVAILABLE, `${oldest.connection.peer} said GOAWAY on more than ${MAX_DRAINING_CONNECTIONS} connections whose calls had not finished: the oldest is closed, its calls with it`));
  }

  /** Registers a call whose end is a RESPONSE (or ERROR); the abort of `scope` cancels it. */
  #open(session: ClientSession, scope: CallScope, onCredit?: (n: number) => void): { id: number; result: Promise<FinalFrame> } {
    let id = 0;
    const { exposures } = session.connection;
    const result = new Promise<FinalFrame>((resolve, reject) => {
      id = session.open({
        final: (r) => {
          // The call is over: what it exposed for RMA goes back (cancel() does it on an abort).
          if (exposures.size > 0) exposures.releaseCall(id);
          if (r instanceof GdrpcError) reject(r);
          else resolve(r);
        },
        ...(onCredit !== undefined ? { credit: onCredit } : {}),
      });
      scope.onAbort((reason) => {
        cancel(session, id, reason);
        reject(reason);
      });
    });
    // A failure nobody awaits yet (the send failed first) is not an unhandled rejection.
    result.catch(() => {});
    return { id, result };
  }

  /** Encodes and sends a REQUEST or STREAM_ITEM with its tensors; returns the transfers, at once
   *  for a frame without tensor bytes (the small call makes no promise here), else once the frame
   *  left (and, with `awaitTransfers`, its tag sends completed). Failures always come as a
   *  rejected promise, never thrown. */
  #send(session: ClientSession, id: number, kind: FrameKind.Request | FrameKind.StreamItem, method: MethodDescriptor, values: Row, options: CallOptions, scope: CallScope, awaitTransfers: boolean, seq = 0, window?: number): Sent | Promise<Sent> {
    try {
      return this.#sendFrame(session, id, kind, method, values, options, scope, awaitTransfers, seq, window);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  #sendFrame(session: ClientSession, id: number, kind: FrameKind.Request | FrameKind.StreamItem, method: MethodDescriptor, values: Row, options: CallOptions, scope: CallScope, awaitTransfers: boolean, seq: number, window: number | undefined): Sent | Promise<Sent> {
    const label = kind === FrameKind.Request ? `${methodName(method)} arguments.` : `${methodName(method)} arguments[${seq}].`;
    const out = new OutgoingTensors({ connection: session.connection, call: id }, { mover: options.mover ?? 'auto', noStaging: options.noStaging ?? false }, { side: 'client', label });
    let encoded: Row;
    try {
      encoded = encodeFields(method.args, values, methodTypes(method), out.encode, '');
      out.finish();
    } catch (error) {
      out.discard();
      throw error;
    }
    let request: RequestBody | undefined;
    if (kind === FrameKind.Request) {
      request = { svc: method.service, m: method.name, a: encoded };
      const remaining = scope.remainingMs();
      if (remaining !== undefined) request.to = remaining;
      if (options.metadata !== undefined) request.md = options.metadata;
      if (window !== undefined) {
        // A server stream: its items' untaken tensor bytes are held to maxResultBytes together,
        // and the server is told to wait for them to be taken (streams.ts).
        request.win = window;
        request.winb = this.#options.maxResultBytes;
      }
      putPolicy(request, options);
    }
    if (scope.aborted) out.discard();
    scope.throwIfAborted();
    // A frame without tensor bytes is not waited for and starts nothing once it left: the answer
    // cannot come before it left, and a failed send fails the connection, hence the call. It is
    // posted, which makes no promise. A frame the connection refused (over the peer's frame
    // limit, or closed) throws here and ends the call.
    if (out.transfers.length === 0) {
      const posted = new PostedFrame((error) => { if (session.connection.isOpen) scope.abort(GdrpcError.from(error)); });
      if (request !== undefined) session.connection.post(FrameKind.Request, id, request, posted);
      else session.connection.post(FrameKind.StreamItem, id, { seq, a: encoded }, posted);
      return { transfers: out.transfers, frame: posted };
    }
    // Once the frame is on its way the server expects the bytes it announces, abort or not: the
    // transfers start as its message is handed to UCX (Connection.postThen).
    let moving: Promise<void> | undefined;
    const start = (): void => {
      moving = out.start();
      moving.catch(() => { /* surfaced through the call's own failure */ });
    };
    const frameSent = request !== undefined
      ? session.connection.postThen(FrameKind.Request, id, request, start, () => out.discard())
      : session.connection.postThen(FrameKind.StreamItem, id, { seq, a: encoded }, start, () => out.discard());
    const sent: Sent = { transfers: out.transfers, frame: frameSent };
    return (async () => {
      await scope.race(frameSent);
      // Tag sends complete when the server has the bytes; RMA exposures when it sent FIN. The
      // response can only follow either, so waiting here adds no latency and keeps errors ordered.
      if (awaitTransfers && out.transfers.some((t) => t.mover === 'tag')) await scope.race(moving!);
      return sent;
    })();
  }

  /** Decodes a result object, validates it, receives its tensors (results.ts). */
  #receive(session: ClientSession, id: number, method: MethodDescriptor, wire: Row, scope: CallScope, options: CallOptions, held?: HeldItems): Received | Promise<Received> {
    return receiveResults({ connection: session.connection, call: id }, method, wire, scope, options, this.#landing, held);
  }

  /** Where results land: the owner dialer of remote handles, and memory for their tensors. */
  readonly #landing: ResultLanding = {
    maxTensor: () => this.#options.maxTensorBytes,
    maxTotal: () => this.#options.maxResultBytes,
    dialOwner: () => this.#dialOwner ??= ownerDialer(this.#runtime),
    allocate: (shape, dtype, placement, field) => this.#allocate(shape, dtype, placement, field),
  };

  #allocate(shape: number[], dtype: Parameters<Allocate>[1], placement: Placement, field: string): Tensor {
    const device = landingDevice(placement, this.#receiveOn, cudaReceives());
    try {
      if (this.#options.poolBytes === 0) return Tensor.empty(shape, dtype, { device });
      return this.pool(device).allocate(shape, dtype);
    } catch (error) {
      throw clientAllocationFailed(error, field);
    }
  }
}

/** Splits "host:port" (or passes {host, port} through), checking the host and the port. */
export function parseAddress(address: string | { host: string; port: number }): { host: string; port: number } {
  const bad = (why: string): GdrpcError => new GdrpcError(Code.INVALID_ARGUMENT, `bad address ${JSON.stringify(address)}: ${why}`);
  const ipv4Only = 'gdrpc connects over IPv4: give an IPv4 address or a host name that has one';
  let host: unknown;
  let port: unknown;
  if (typeof address === 'string') {
    if (/^[a-z][a-z0-9+.-]*:\/\//i.test(address)) throw bad('expected "host:port", with no scheme');
    if (address.startsWith('[') || isIP(address) === 6) throw bad(ipv4Only);
    const colon = address.lastIndexOf(':');
    if (colon < 0) throw bad('expected "host:port"');
    host = address.slice(0, colon);
    const text = address.slice(colon + 1);
    port = /^\d{1,5}$/.test(text) ? Number(text) : NaN;
    if (!(Number(port) >= 1 && Number(port) <= 65535)) throw bad(`the port must be an integer from 1 to 65535, got ${JSON.stringify(text)}`);
  } else if (typeof address === 'object' && address !== null) {
    ({ host, port } = address);
  } else {
    throw bad('expected "host:port" or { host, port }');
  }
  if (typeof host !== 'string' || host === '') throw bad('expected "host:port"');
  if (isIP(host) === 6 || host.includes(':')) throw bad(ipv4Only);
  if (typeof port !== 'number' || !Number.isInteger(port) || port <= 0 || port > 65535) {
    throw bad(`the port must be an integer from 1 to 65535, got ${typeof port === 'number' ? String(port) : `${JSON.stringify(port)} (${typeof port})`}`);
  }
  return { host, port };
}

/** Default ClientOptions.connectTimeoutMs. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 5000;

/** How remote handles that arrived on `runtime` are pulled. No pool unless the caller gave one: a
 *  process that only pulls should not map a 64 MiB pool for it (a one-off registration per pull
 *  instead; pass `pool` to avoid it). A handle from the default runtime pulls through whichever
 *  default runtime is open then: the one it came on may have closed with its last client. */
export function ownerDialer(runtime: Runtime): OwnerDialer {
  const dial = async (owner: string, token: string | undefined, limits: PullLimits = {}): Promise<OwnerClient> => {
    // The pull's deadline and signal end its connect too: a pull with a 1 s deadline from owners
    // that never sent HELLO settled after the 5 s connect timeout.
    const deadline = limits.deadline?.getTime() ?? Infinity;
    const late = (): GdrpcError => new GdrpcError(Code.DEADLINE_EXCEEDED, `pull: deadline exceeded while connecting to the owner at ${owner}`);
    if (Date.now() >= deadline) throw late();
    if (limits.signal?.aborted === true) throw GdrpcError.from(limits.signal.reason, Code.CANCELLED);
    const untilDeadline = Math.max(1, Math.ceil(deadline - Date.now()));
    const connectTimeoutMs = Math.min(DEFAULT_CONNECT_TIMEOUT_MS, untilDeadline);
    const started = performance.now();
    let client: Client;
    try {
      client = await Client.connect(owner, { poolBytes: 0, connectTimeoutMs, ...(runtime.implicit ? {} : { runtime }), ...(token !== undefined ? { token } : {}), ...(limits.signal !== undefined ? { [CONNECT_SIGNAL]: limits.signal } : {}), [NARROW_WINDOW]: true });
    } catch (error) {
      // A connect the deadline cut short (its timers and Date.now() may differ by a millisecond).
      const cut = connectTimeoutMs === untilDeadline && performance.now() - started >= connectTimeoutMs - 1;
      throw cut && error instanceof GdrpcError && error.code === Code.UNAVAILABLE ? Object.assign(late(), { cause: error }) : error;
    }
    // A malformed frame from the owner fails the call it belongs to; with no listener, the
    // 'error' event would throw before that call was finished, and a pull would never end.
    client.on('error', () => { /* the failing call reports it */ });
    // The runtime the client came to: for an implicit one, the default runtime now (the one the
    // handle arrived on may have closed since, with its last user).
    const on = runtime.implicit ? Runtime.default() : runtime;
    return {
      unary: (method, args, allocate, limits) => client.unary(method, args, { [ALLOCATE]: allocate, ...limits }),
      copyBlocks: (bytes, copies, options) => on.blocks.copy(bytes, copies, options),
      staging: (device) => on.pool(device, { bytes: DEFAULT_PROCESS_POOL_BYTES, allowOverflow: true }),
      close: () => client.close(),
    };
  };
  return Object.assign(dial, { runtime });
}
