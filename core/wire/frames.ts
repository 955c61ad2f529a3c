// Control frames: what each kind carries. The message header says the kind (message.ts); the body is a msgpack
// map whose keys are listed here and in docs/wire.md. Bodies are checked field by field when
// they arrive (codec.ts), because a peer may be hostile or simply another implementation.

/** Wire format version carried in every frame as `v`. A peer rejects frames of another major. */
export const WIRE_VERSION = 2;

/** Frame kinds (the first byte of each frame in a message). Values are part of the wire format. */
export enum FrameKind {
  /** server -> client, first frame on a connection (key 0): the server's connection key, limits, challenge. */
  Hello = 1,
  /** client -> server: the client's connection key and, when the server asked, the HMAC proof. */
  Auth = 2,
  /** server -> client: admission granted (or an Error frame with call 0 and a disconnect). */
  Ready = 3,
  Request = 4,
  Response = 5,
  Error = 6,
  Cancel = 7,
  StreamItem = 8,
  StreamEnd = 9,
  Keepalive = 10,
  /** Receiver -> sender: an RMA exposure has been read (or will never be) and can be released. */
  Fin = 11,
  /** server -> client: no new calls on this connection (shutdown); in-flight calls continue. */
  GoAway = 12,
  // 13 was BATCH in wire version 1; every message may hold several frames now (message.ts).
  /** Receiver -> sender of a stream: `n` more items may be sent (the REQUEST's `win` opened it). */
  Credit = 14,
}

/** A tensor value as it travels inside a frame (see docs/wire.md "Tensor descriptors"). */
export interface TensorWire {
  /** dtype name */
  dt: string;
  /** shape */
  sh: number[];
  /** byte length (= product(shape) * element size) */
  n: number;
  /** memory type at the sender: 'host' | 'cuda' */
  mt: string;
  /** mover: 'i' inline, 't' tag rendezvous, 'r' RMA pull, 'h' remote handle */
  m: 'i' | 't' | 'r' | 'h';
  /** inline bytes (m = 'i') */
  b?: Uint8Array;
  /** transfer id (m = 't': payload tag's low 32 bits) or exposure id (m = 'r' | 'h') */
  x?: number;
  /** remote address (m = 'r') */
  a?: bigint;
  /** packed rkey (m = 'r') */
  k?: Uint8Array;
  /** owner address "host:port" (m = 'h') */
  o?: string;
  /** 16-byte capability that a pull of a remote handle must present (m = 'h') */
  s?: Uint8Array;
}

export interface HelloFrame { v: number; key: bigint; chal?: Uint8Array; maxFrame: number; maxTensor: number; inline: number; live: number; /** the server can receive into CUDA memory */ gpu?: boolean; /** the server stages CUDA receives through host memory */ stg?: boolean }
export interface AuthFrame { v: number; key: bigint; proof?: Uint8Array; live?: number; /** the client can receive into CUDA memory */ gpu?: boolean; stg?: boolean; /** largest frame the client reads */ maxFrame?: number }
export interface ReadyFrame { v: number }
export interface RequestFrame {
  v: number;
  svc: string;
  m: string;
  /** argument object (absent on client-streaming calls, whose arguments come as StreamItems) */
  a?: Record<string, unknown>;
  /** milliseconds left until the caller's deadline when the frame was sent */
  to?: number;
  md?: Record<string, string>;
  /** server streaming: items the server may send before the client grants more (CREDIT); absent: no limit */
  win?: number;
  /** mover the caller forces ('inline' | 'tag' | 'rma'); absent: auto */
  mv?: string;
  /** no staging through host memory */
  ns?: boolean;
}
export interface ResponseFrame { v: number; r: Record<string, unknown> }
export interface ErrorFrame { v: number; code: string; msg: string; det?: Record<string, unknown> }
export interface CancelFrame { v: number; /** why: CANCELLED (default) or DEADLINE_EXCEEDED */ code?: string }
export interface StreamItemFrame { v: number; seq: number; a: Record<string, unknown> }
export interface StreamEndFrame { v: number; seq: number }
export interface KeepaliveFrame { v: number }
export interface FinFrame { v: number; x: number }
export interface GoAwayFrame { v: number }
export interface CreditFrame { v: number; n: number }
