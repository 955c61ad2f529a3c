// Control frames: what each kind carries, as one table. The message header says the kind
// (message.ts); the body is a msgpack map whose fields are listed here, and nowhere else: the
// body types below come from this table, codec.ts checks every arriving body against it, and
// test/wire/doc.test.ts checks docs/wire.md against it.
import { optional, type BodyOf, type Fields } from './schema.ts';

/** Wire format version carried in every frame as `v`. A peer rejects frames of another major. */
export const WIRE_VERSION = 2;

/** Tensors one frame may carry. Each costs its receiver a posted receive (or a FIN) even when
 *  the frame is refused, so a peer's one message must not carry hundreds of thousands; a sender
 *  fails such a frame locally, a receiver closes the connection (docs/security.md). */
export const MAX_TENSORS_PER_FRAME = 16_384;

/** Frame kinds (the first byte of each frame in a message). Values are part of the wire format. */
export enum FrameKind {
  /** server -> client, first frame on a connection (key 0): the server's connection key, limits, challenge. */
  Hello = 1,
  /** client -> server: the client's connection key and, when the server asked, the HMAC proof. */
  Auth = 2,
  /** server -> client: admission granted (or an Error frame with call 0 and a disconnect). */
  Ready = 3,
  /** client -> server: starts a call. */
  Request = 4,
  /** server -> client: the results of a unary or client-streaming call. */
  Response = 5,
  /** either way: a call (or, with call 0, the connection) failed. */
  Error = 6,
  /** client -> server: the caller gave up on the call. */
  Cancel = 7,
  /** either way: one item of a streamed direction. */
  StreamItem = 8,
  /** either way: a streamed direction ended. */
  StreamEnd = 9,
  /** either way: liveness when nothing else was sent. */
  Keepalive = 10,
  /** Receiver -> sender: an RMA exposure has been read (or will never be) and can be released. */
  Fin = 11,
  /** server -> client: no new calls on this connection (shutdown); in-flight calls continue. */
  GoAway = 12,
  // 13 was BATCH in wire version 1; every message may hold several frames now (message.ts).
  /** Receiver -> sender of a stream: `n` more items may be sent (the REQUEST's `win` opened it).
   *  On call 0, either way: the receiver read `n` more bytes of the connection's messages, which
   *  the sender may send again (the message window, HELLO's and AUTH's `win`). */
  Credit = 14,
  /** Sender -> receiver of a tag transfer: how UCX moved its bytes, once the send completed
   *  (sent only to a peer that announced `rep`). */
  Sent = 15,
  /** Sender -> receiver of tag transfers: SENT for many transfers at once, each description sent
   *  once per connection and named by an index after that (sent only to a peer that announced
   *  `rpt`). */
  Reports = 16,
  /** Sender -> receiver of a CREDIT on call 0: that credit arrived (its `id` echoed); the bytes it
   *  gave are sent only after this frame ("Message window"). */
  Ack = 17,
  /** Sender -> receiver, on call 0: the next message waits for `n` bytes more of the message
   *  window than it has; the receiver may lend them (a CREDIT with `loan`; "Message window"). */
  Want = 18,
}

const uint = { type: 'uint' } as const;
const str = { type: 'str' } as const;
const bin = { type: 'bin' } as const;
const bool = { type: 'bool' } as const;
const map = { type: 'map' } as const;
const key = { type: 'key' } as const;

/** One frame kind: the name docs/wire.md gives it and its body's fields (besides `v`). */
export interface FrameSpec { readonly name: string; readonly fields: Fields }

/** Every frame kind's body (docs/wire.md "Control frames"). Optional fields a peer may omit;
 *  absence means what the comment says. Values that need the call's context (a REQUEST's `mv`
 *  names, a CANCEL's `code`) are checked where that context is. */
export const FRAMES = {
  [FrameKind.Hello]: {
    name: 'HELLO',
    fields: {
      /** the server's key for this connection */ key,
      /** present when the server requires a token (gdrpc: 32 bytes) */ chal: optional(bin),
      maxFrame: uint, maxTensor: uint, inline: uint,
      /** liveness, ms */ live: uint,
      /** the server receives `@cuda` tensors into GPU memory (absent: host) */ gpu: optional(bool),
      /** the server stages what it receives into GPU memory through host memory */ stg: optional(bool),
      /** the server reads SENT frames and sends one after each tag transfer it makes */ rep: optional(bool),
      /** the server reads gathered tag transfers (mover `g`) */ gat: optional(bool),
      /** the server reads REPORTS frames (with `rep`: its peer may send those instead of SENT) */ rpt: optional(bool),
      /** bytes of messages the client may send before CREDIT on call 0 gives more ("Message window") */ win: optional(uint),
      /** the most the window grows to with a loan, for one message (absent: `win`; "Message window") */ wmax: optional(uint),
      /** the port the client's connection came from, as the server saw it: the client routes HELLO by it */ cp: optional(uint),
    },
  },
  [FrameKind.Auth]: {
    name: 'AUTH',
    fields: {
      key, proof: optional(bin), live: optional(uint), gpu: optional(bool), stg: optional(bool), rep: optional(bool), gat: optional(bool), rpt: optional(bool),
      /** largest frame the client reads (absent: unlimited) */ maxFrame: optional(uint),
      /** bytes of messages the server may send before CREDIT on call 0 gives more ("Message window") */ win: optional(uint),
      /** the most the window grows to with a loan, for one message (absent: `win`; "Message window") */ wmax: optional(uint),
      /** the client takes READY's `win` (absent: false, and the server's window stays HELLO's) */ rwin: optional(bool),
      /** the client's "address:port" on this connection, as its socket names it: `proof` binds it */ ca: optional(str),
    },
  },
  [FrameKind.Ready]: {
    name: 'READY',
    fields: {
      /** the client's message window from now on: HELLO's `win` and what the server took for it at admission, up to `wmax` (absent: HELLO's; "Message window") */ win: optional(uint),
    },
  },
  [FrameKind.Request]: {
    name: 'REQUEST',
    fields: {
      svc: str, m: str,
      /** argument object (absent on client-streaming calls, whose arguments come as StreamItems) */ a: optional(map),
      /** milliseconds left until the caller's deadline when the frame was sent */ to: optional(uint),
      md: optional({ type: 'strmap' }),
      /** items the other side may send before it waits for CREDIT (absent: no limit) */ win: optional(uint),
      /** server streaming: tensor bytes of items the client holds untaken before the server waits for CREDIT `b` (absent: no limit) */ winb: optional(uint),
      /** mover the caller forces: 'inline' | 'tag' | 'rma' (absent: auto) */ mv: optional(str),
      /** no staging through host memory (absent: false) */ ns: optional(bool),
    },
  },
  [FrameKind.Response]: { name: 'RESPONSE', fields: { r: map } },
  [FrameKind.Error]: { name: 'ERROR', fields: { code: str, msg: str, det: optional(map) } },
  [FrameKind.Cancel]: { name: 'CANCEL', fields: { /** CANCELLED (default) or DEADLINE_EXCEEDED */ code: optional(str) } },
  [FrameKind.StreamItem]: { name: 'STREAM_ITEM', fields: { seq: uint, a: map } },
  [FrameKind.StreamEnd]: { name: 'STREAM_END', fields: { seq: uint } },
  [FrameKind.Keepalive]: { name: 'KEEPALIVE', fields: {} },
  [FrameKind.Fin]: { name: 'FIN', fields: { x: uint } },
  [FrameKind.GoAway]: { name: 'GOAWAY', fields: {} },
  [FrameKind.Credit]: {
    name: 'CREDIT',
    fields: {
      n: uint, /** on call 0 (the message window): the id the ACK echoes */ id: optional(uint),
      /** on call 0: `n` is lent for the next message, in answer to a WANT (absent: false) */ loan: optional(bool),
      /** server streaming: tensor bytes of items the caller took, given back to the REQUEST's `winb` (absent: 0) */ b: optional(uint),
    },
  },
  [FrameKind.Ack]: {
    name: 'ACK',
    fields: {
      /** the id of the CREDIT on call 0 that arrived */ id: uint,
      /** the loan that CREDIT carried is declined: nothing waits for it (absent: false) */ no: optional(bool),
    },
  },
  [FrameKind.Want]: { name: 'WANT', fields: { /** bytes of window the next message needs beyond what it has */ n: uint } },
  [FrameKind.Sent]: {
    name: 'SENT',
    fields: {
      /** the transfer id of the tag transfer whose send completed */ x: uint,
      /** UCX's description of the completed send request (empty: UCX said nothing) */ p: str,
    },
  },
  [FrameKind.Reports]: {
    name: 'REPORTS',
    fields: {
      /** transfer ids of tag transfers whose sends completed */ x: { type: 'uints' },
      /** for each of `x`, the index of its description (below REPORT_DESCRIPTIONS) */ d: { type: 'uints' },
      /** descriptions this frame defines, by index (decimal); an index keeps the description it was
       *  given last */ p: optional({ type: 'strmap' }),
    },
  },
} as const satisfies Record<FrameKind, FrameSpec>;

/** The body of a frame of kind `K`, as decodeFrame hands it out and Connection.send takes it. */
export type FrameBody<K extends FrameKind> = K extends FrameKind ? BodyOf<(typeof FRAMES)[K]['fields']> : never;

/** A decoded frame: `kind` tells the body's type. */
/** A frame; `weight` is what its body decoded to in heap, as plain.ts weighs it (received frames). */
export type Frame = { [K in FrameKind]: { kind: K; call: number; body: FrameBody<K>; weight?: number } }[FrameKind];

/** The frame spec of `kind`, or undefined for a kind this version does not have. */
export function frameSpec(kind: number): FrameSpec | undefined {
  return Object.hasOwn(FRAMES, kind) ? (FRAMES as Record<number, FrameSpec>)[kind] : undefined;
}

/** Fields every tensor descriptor has (docs/wire.md "Tensor descriptors"). */
export const TENSOR_FIELDS = {
  /** dtype name (checked against the dtypes where the descriptor is used) */ dt: str,
  /** shape */ sh: { type: 'uints' },
  /** byte length (= product(shape) * element size) */ n: uint,
  /** memory type at the sender: 'host' | 'cuda' */ mt: str,
  /** mover: inline, tag rendezvous, gathered tag rendezvous, RMA pull, remote handle */ m: { type: 'str', oneOf: ['i', 't', 'g', 'r', 'h'] },
} as const satisfies Fields;

/** The fields each mover adds to a descriptor. */
export const MOVER_FIELDS = {
  /** the bytes themselves */ i: { b: { type: 'bin', lengthIn: 'n' } },
  /** x: transfer id (the payload tag's low 32 bits); st: the sender staged through host memory */
  t: { x: uint, st: optional(bool) },
  /** x: transfer id of the one message the tensors of a gather share; f: this tensor's byte offset in it */
  g: { x: uint, f: uint },
  /** x: exposure id; a: remote address; k: packed rkey */
  r: { x: uint, a: { type: 'u64' }, k: bin, st: optional(bool) },
  /** o: owner "host:port"; x: exposure id; s: capability a pull presents (gdrpc: 16 bytes) */
  h: { o: str, x: uint, s: bin },
} as const satisfies Record<(typeof TENSOR_FIELDS)['m']['oneOf'][number], Fields>;

type MoverFields = typeof MOVER_FIELDS;
/** A tensor value as it travels inside a frame: the common fields, and those of its mover. */
export type TensorWire = BodyOf<typeof TENSOR_FIELDS>
  & Partial<BodyOf<MoverFields['i']> & BodyOf<MoverFields['t']> & BodyOf<MoverFields['g']> & BodyOf<MoverFields['r']> & BodyOf<MoverFields['h']>>;
