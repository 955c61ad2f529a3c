/** Status codes shared by the binding, the RPC runtime and the wire format. */
export const Code = {
  CANCELLED: 'CANCELLED',
  DEADLINE_EXCEEDED: 'DEADLINE_EXCEEDED',
  INVALID_ARGUMENT: 'INVALID_ARGUMENT',
  NOT_FOUND: 'NOT_FOUND',
  UNIMPLEMENTED: 'UNIMPLEMENTED',
  RESOURCE_EXHAUSTED: 'RESOURCE_EXHAUSTED',
  FAILED_PRECONDITION: 'FAILED_PRECONDITION',
  UNAVAILABLE: 'UNAVAILABLE',
  UNAUTHENTICATED: 'UNAUTHENTICATED',
  PERMISSION_DENIED: 'PERMISSION_DENIED',
  INTERNAL: 'INTERNAL',
} as const;
export type Code = (typeof Code)[keyof typeof Code];

const codes = new Set<string>(Object.values(Code));

/** True when `value` is one of the status codes. */
export function isCode(value: unknown): value is Code {
  return typeof value === 'string' && codes.has(value);
}

export interface GdrpcErrorOptions {
  cause?: unknown;
  /** The transfer path that failed (inline, shm, tcp, cuda_ipc, rdma, staged), where one did. */
  path?: string;
  /** The UCX status name behind the error, when UCX reported one (for example UCS_ERR_CONNECTION_RESET). */
  ucsStatus?: string;
  /** Free-form details carried over the wire with the error. */
  details?: Record<string, unknown>;
}

/** The one error class of gdrpc: a status code, a message, a cause. Native code throws it too. */
export class GdrpcError extends Error {
  override readonly name = 'GdrpcError';
  readonly code: Code;
  readonly path: string | undefined;
  readonly ucsStatus: string | undefined;
  readonly details: Record<string, unknown> | undefined;

  constructor(code: Code, message: string, options: GdrpcErrorOptions = {}) {
    super(`[${code}] ${message}`, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.rawMessage = message;
    this.path = options.path;
    this.ucsStatus = options.ucsStatus;
    this.details = options.details;
  }

  /** The message without the code prefix. */
  readonly rawMessage: string;

  /** Wraps anything thrown into a GdrpcError, keeping an existing one as it is. */
  static from(reason: unknown, code: Code = Code.INTERNAL): GdrpcError {
    if (reason instanceof GdrpcError) return reason;
    if (reason instanceof Error && reason.name === 'AbortError') {
      return new GdrpcError(Code.CANCELLED, reason.message || 'operation aborted', { cause: reason });
    }
    if (reason instanceof Error) return new GdrpcError(code, reason.message, { cause: reason });
    return new GdrpcError(code, String(reason), { cause: reason });
  }
}
