// The rules of the RPC options objects (core/tensor/options.ts says why they are checked up front).
// Each table has a rule for every option of its type: the compiler fails when one is added
// without a rule.
import { Accept, isRecord, rule, type OptionRules } from '../tensor/options.ts';
import type { CallOptions, ClientOptions } from './client.ts';
import type { RegisterOptions, ServerOptions } from './server.ts';
import { isDevice } from '../tensor/device.ts';

/** Movers a caller may force (CallOptions.mover). */
export const MOVER_CHOICES = ['auto', 'inline', 'tag', 'rma'] as const;

/** Worker busy polling (at most 10 s, as the binding allows). */
export const BUSY_POLL_US = Accept.integer(0, 10_000_000, 'microseconds');

const DEADLINE = rule('milliseconds from now (a number; Infinity: none) or a valid Date',
  (v) => (typeof v === 'number' && !Number.isNaN(v)) || (v instanceof Date && !Number.isNaN(v.getTime())));
// The server refuses a REQUEST whose metadata holds anything but strings, as malformed.
const METADATA = rule('an object whose values are strings', (v) => isRecord(v) && Object.values(v).every((item) => typeof item === 'string'));

// Not 'cpu': the handshake tells the peer that this side takes `@cuda` tensors in GPU memory, and
// the peer sends them so; host memory is the schema's `@host`.
const RECEIVE_DEVICE = rule("'cuda:N' (where a bare @cuda tensor is received)", (v) => isDevice(v) && v !== 'cpu');

export const CLIENT_OPTIONS: OptionRules<ClientOptions> = {
  token: Accept.nonEmptyString, livenessMs: Accept.positiveMs, connectTimeoutMs: Accept.positiveMs,
  inlineBytes: Accept.bytes, busyPollUs: BUSY_POLL_US, poolBytes: Accept.bytes,
  device: RECEIVE_DEVICE,
};

export const SERVER_OPTIONS: OptionRules<ServerOptions> = {
  maxCallsPerConnection: Accept.count, maxCalls: Accept.count, maxFrameBytes: Accept.positiveBytes,
  maxTensorBytes: Accept.bytes, poolBytes: Accept.bytes, allowPoolOverflow: Accept.boolean, poolWaitMs: Accept.ms,
  maxPoolBytesPerConnection: Accept.positiveBytes, token: Accept.nonEmptyString, admissionTimeoutMs: Accept.positiveMs,
  transferTimeoutMs: Accept.positiveMs, maxConnections: Accept.count, maxConnectionsPerAddress: Accept.count,
  livenessMs: Accept.positiveMs, inlineBytes: Accept.bytes, busyPollUs: BUSY_POLL_US, exposureHoldMs: Accept.ms,
  exposeErrorMessages: Accept.boolean, device: RECEIVE_DEVICE,
};

export const REGISTER_OPTIONS: OptionRules<RegisterOptions> = { device: RECEIVE_DEVICE };

export const CALL_OPTIONS: OptionRules<CallOptions> = {
  deadline: DEADLINE, signal: Accept.signal, metadata: METADATA,
  mover: Accept.oneOf(...MOVER_CHOICES), noStaging: Accept.boolean,
};
