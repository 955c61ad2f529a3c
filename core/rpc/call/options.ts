// The RPC options objects and their rules (core/tensor/options.ts says why they are checked up
// front). Each table has a rule for every option of its type: the compiler fails when one is added
// without a rule. The types live here, below client.ts and server.ts, so that the tables and
// call-checks.ts need not import those back.
import { Accept, isRecord, rule, type OptionRules } from '../../tensor/options.ts';
import type { MoverName } from '../movers/mover.ts';
import { BUSY_POLL_US, Runtime } from '../runtime/runtime.ts';
import type { Allocate } from '../transfer/transfer.ts';
import type { CudaDevice } from './placement.ts';
import { isDevice } from '../../tensor/device.ts';

/** Internal call option: where result tensors go (RemoteTensor.pull uses it). */
export const ALLOCATE: unique symbol = Symbol('gdrpc.allocate');
/** Internal client option: a signal that gives up Client.connect (a pull's, for its owner). */
export const CONNECT_SIGNAL: unique symbol = Symbol('gdrpc.connectSignal');
/** Internal client option: a pull's connection to an owner, whose answers are small: it keeps
 *  the 256 KiB opening window instead of taking more from the runtime's maxWindowBytes. */
export const NARROW_WINDOW: unique symbol = Symbol('gdrpc.narrowWindow');

export interface CallOptions {
  /** Milliseconds from now, or an absolute Date. Covers transfers as well as the handler. */
  deadline?: number | Date;
  signal?: AbortSignal;
  metadata?: Record<string, string>;
  /** Force a tensor mover for arguments and results; default 'auto' (the measured best per memory type and size). */
  mover?: 'auto' | MoverName;
  /** Fail with FAILED_PRECONDITION instead of staging tensor bytes through host memory, on either
   *  side, arguments and results alike (the server is told in the REQUEST). */
  noStaging?: boolean;
  [ALLOCATE]?: Allocate | undefined;
}

export interface ClientOptions {
  [CONNECT_SIGNAL]?: AbortSignal;
  [NARROW_WINDOW]?: boolean;
  /** The runtime this client runs on (worker, pools, remote tensors); default Runtime.default(). */
  runtime?: Runtime;
  /** Shared token for servers that require admission (never sent: HMAC challenge-response). */
  token?: string;
  /** A silent server is declared gone after this long (default 10000 ms; a dead one is seen sooner, by UCX). */
  livenessMs?: number;
  /** Handshake time limit (default 5000 ms). */
  connectTimeoutMs?: number;
  /** Largest host tensor sent inline (default 4 KiB). */
  inlineBytes?: number;
  /** Keep progressing the worker this long after work before sleeping (lower latency for CPU);
   *  the first Client or Server of the default runtime decides (a given `runtime` was made with
   *  its own). Default 'adaptive' (or GDRPC_BUSY_POLL_US): see RuntimeOptions. */
  busyPollUs?: number | 'adaptive';
  /** Size of the runtime's pools results are received into, when this client creates them (default
   *  64 MiB; 0: plain allocations per result, no pool). */
  poolBytes?: number;
  /** Where `@cuda` results are received (default cuda:0); `@cuda(N)` stays on N, and without a
   *  GPU `@cuda` results are host memory. */
  device?: CudaDevice;
  /** Largest single result tensor accepted, checked before anything is allocated (default 1 GiB,
   *  as ServerOptions.maxTensorBytes): a larger one fails the call RESOURCE_EXHAUSTED. */
  maxTensorBytes?: number;
  /** Most tensor bytes one result object (a call's results, or one stream item) may announce in
   *  all, checked before anything is allocated (default 4 GiB): more fail the call
   *  RESOURCE_EXHAUSTED. Results are received into memory allocated for them whatever the pool
   *  holds, so without it a server could make this client allocate (and on GPUs hold) up to
   *  16,384 x maxTensorBytes per call. */
  maxResultBytes?: number;
}

export interface ServerOptions {
  /** The runtime this server runs on (worker, pools, remote tensors); default Runtime.default(). */
  runtime?: Runtime;
  /** Calls in flight per connection (default 256); more get RESOURCE_EXHAUSTED. */
  maxCallsPerConnection?: number;
  /** Calls in flight over all connections (default 4096). */
  maxCalls?: number;
  /** Calls in flight from one peer address, over all its connections (default 1024, a quarter
   *  of the default maxCalls): one address cannot take every slot of maxCalls. */
  maxCallsPerAddress?: number;
  /** What the REQUEST bodies of the calls in flight may hold decoded, together, weighed as the
   *  wire's plain-msgpack check weighs them (about their heap; tensors received into pools count
   *  their descriptors only), until their handlers return (default 1 GiB); past it a call is
   *  refused RESOURCE_EXHAUSTED. One call alone is always taken. */
  maxArgumentBytes?: number;
  /** Largest control frame accepted (default 4 MiB, inline tensors included). */
  maxFrameBytes?: number;
  /** Largest single tensor accepted, checked before allocation (default 1 GiB). */
  maxTensorBytes?: number;
  /** Receiving pool per device, mapped once (default 128 MiB; 0: plain allocations). */
  poolBytes?: number;
  /** When the pool is full, register a one-off allocation instead of waiting (default false). */
  allowPoolOverflow?: boolean;
  /** An argument tensor that does not fit in the pool now waits, first come first served, this long
   *  at most (and never past its call's deadline) for blocks that other calls free, then fails
   *  RESOURCE_EXHAUSTED (default 10000 ms; 0: fail at once). */
  poolWaitMs?: number;
  /** Bytes of argument tensors that may wait for the pool at once (default poolBytes). A tensor
   *  that would queue beyond it is refused at once, RESOURCE_EXHAUSTED with `retryable: true`,
   *  rather than waiting behind more than the pool can soon free; a connection with nothing
   *  waiting may queue one past it, up to twice it in all. */
  poolQueueBytes?: number;
  /** Pool bytes one connection's calls may hold before its waiting tensors let other connections'
   *  go first (default half of poolBytes); a connection alone may use the whole pool. */
  maxPoolBytesPerConnection?: number;
  /** Shared token clients must prove (HMAC challenge-response) before any call. */
  token?: string;
  /** With a token: refuse a proof that does not name the client's address (AUTH `ca`: clients
   *  whose UCX does not tell it, gdrpc clients from before it), which a peer able to forge a
   *  client's HELLO could have admit its own connection (docs/security.md). Default false. */
  requireClientAddress?: boolean;
  /** A connection that has not completed the handshake by then is closed (default 5000 ms);
   *  nothing it sends extends this. */
  admissionTimeoutMs?: number;
  /** Tensor bytes a client announced must arrive within this long once the server waits for
   *  them, and tensor bytes the server sends (results, pulls) must be taken by the client within
   *  it (default 30 s); otherwise the connection is closed and the memory returns. */
  transferTimeoutMs?: number;
  /** Connections open at once, admitted or not (default 1024); more are rejected at connect. */
  maxConnections?: number;
  /** Argument tensors the server's calls may be receiving at once over all connections (default
   *  131,072; each connection's calls at most 65,536): a call that would pass it is refused
   *  RESOURCE_EXHAUSTED with `retryable: true`. Each tensor whose bytes have not come holds a few
   *  KB of heap (about 5.9 KB measured) until they do or `transferTimeoutMs` passes. */
  maxAwaitedTensors?: number;
  /** Connections open at once from one peer IP address (default 64). */
  maxConnectionsPerAddress?: number;
  /** A silent client is declared gone after this long (default 10000 ms; a dead one is seen sooner, by UCX). */
  livenessMs?: number;
  /** Largest host tensor the server sends inline (default 4 KiB). */
  inlineBytes?: number;
  /** Keep progressing the worker this long after work before sleeping (see ClientOptions). */
  busyPollUs?: number | 'adaptive';
  /** How long results exposed for RMA wait for the client's FIN (default 30 s). */
  exposureHoldMs?: number;
  /** Send the message of a handler's plain Error (not a GdrpcError) to the client instead of a
   *  generic "internal error in handler ..." (default false: such messages may hold secrets). */
  exposeErrorMessages?: boolean;
  /** Let admitted peers map the CUDA allocation an exposed GPU tensor lies in and read its blocks
   *  with kernels of their own (RemoteTensor.pullBlocks `direct`): no staging, no message per
   *  part. Such a peer can read and write that whole allocation for as long as it keeps it
   *  mapped, after the exposure ended too: for peers trusted that far only (default false;
   *  docs/security.md "Direct pulls"). */
  directPulls?: boolean;
  /** Where `@cuda` arguments are received (default cuda:0; register() may say otherwise per
   *  service); `@cuda(N)` stays on N, and without a GPU `@cuda` arguments are host memory. */
  device?: CudaDevice;
}

/** Options of one service's registration (Server.register). */
export interface RegisterOptions {
  /** Where this service's `@cuda` arguments are received (default: ServerOptions.device). */
  device?: CudaDevice;
}

/** Movers a caller may force (CallOptions.mover). */
export const MOVER_CHOICES = ['auto', 'inline', 'tag', 'rma'] as const;

// The server refuses a REQUEST whose metadata holds anything but strings, as malformed.
const METADATA = rule('an object whose values are strings', (v) => isRecord(v) && Object.values(v).every((item) => typeof item === 'string'));

// Not 'cpu': the handshake tells the peer that this side takes `@cuda` tensors in GPU memory, and
// the peer sends them so; host memory is the schema's `@host`.
const RECEIVE_DEVICE = rule("'cuda:N' (where a bare @cuda tensor is received)", (v) => isDevice(v) && v !== 'cpu');

/** Runtime.create() or Runtime.default(), not closed yet. */
export const RUNTIME = rule('an open Runtime (Runtime.create())', (v) => v instanceof Runtime && !v.closed);

/** maxTensorBytes by default, a server's for arguments and a client's for results: one tensor is
 *  checked against it before anything is allocated for it. */
export const DEFAULT_MAX_TENSOR_BYTES = 1 << 30;

/** ClientOptions.maxResultBytes by default: four tensors of the largest size. */
export const DEFAULT_MAX_RESULT_BYTES = 4 * DEFAULT_MAX_TENSOR_BYTES;

export const CLIENT_OPTIONS: OptionRules<ClientOptions> = {
  token: Accept.nonEmptyString, livenessMs: Accept.positiveMs, connectTimeoutMs: Accept.positiveMs,
  inlineBytes: Accept.bytes, busyPollUs: BUSY_POLL_US, poolBytes: Accept.bytes,
  device: RECEIVE_DEVICE, runtime: RUNTIME, maxTensorBytes: Accept.bytes, maxResultBytes: Accept.bytes,
};

export const SERVER_OPTIONS: OptionRules<ServerOptions> = {
  maxCallsPerConnection: Accept.count, maxCalls: Accept.count, maxCallsPerAddress: Accept.count, maxArgumentBytes: Accept.bytes, maxFrameBytes: Accept.positiveBytes,
  maxTensorBytes: Accept.bytes, poolBytes: Accept.bytes, allowPoolOverflow: Accept.boolean, poolWaitMs: Accept.ms, poolQueueBytes: Accept.bytes,
  maxPoolBytesPerConnection: Accept.positiveBytes, token: Accept.nonEmptyString, requireClientAddress: Accept.boolean, admissionTimeoutMs: Accept.positiveMs,
  transferTimeoutMs: Accept.positiveMs, maxConnections: Accept.count, maxConnectionsPerAddress: Accept.count, maxAwaitedTensors: Accept.count,
  livenessMs: Accept.positiveMs, inlineBytes: Accept.bytes, busyPollUs: BUSY_POLL_US, exposureHoldMs: Accept.ms,
  exposeErrorMessages: Accept.boolean, directPulls: Accept.boolean, device: RECEIVE_DEVICE, runtime: RUNTIME,
};

export const REGISTER_OPTIONS: OptionRules<RegisterOptions> = { device: RECEIVE_DEVICE };

export const CALL_OPTIONS: OptionRules<CallOptions> = {
  deadline: Accept.deadline, signal: Accept.signal, metadata: METADATA,
  mover: Accept.oneOf(...MOVER_CHOICES), noStaging: Accept.boolean,
};
