// One plan per tensor transfer, made before any byte moves: the mover, the memory at both ends,
// whether gdrpc stages the bytes through host memory and why, the predicted path, and what a
// noStaging call fails with. The sender plans from its tensor and what the peer announced; the
// receiver plans from the descriptor and its own memory, once when the frame is decoded (nothing
// allocated yet) and again when its destination exists. Facts that cost a call into UCX or CUDA
// are functions, asked only when a decision needs them: planning calls no more than the decisions
// did before they were gathered here, and tests can plan without a GPU or an endpoint.
import { Code, GdrpcError } from '../../errors.ts';
import type { Placement } from '../../schema/descriptor.ts';
import type { Endpoint } from '../../ucx/index.ts';
import type { TensorWire } from '../../wire/frames.ts';
import { chooseMover } from './choose.ts';
import type { MoverName, TransferPath } from './mover.ts';
import { transferPath } from './path.ts';

/** Where bytes sit at one end of a transfer, as the wire names it. */
export type MemoryKind = 'host' | 'cuda';

/** How the sending side wants its tensors moved. */
export interface SendPolicy { mover: 'auto' | MoverName; noStaging: boolean }

/** One tensor's transfer as one side decided it; frozen once made. */
export interface TransferPlan {
  readonly mover: MoverName;
  readonly bytes: number;
  /** Memory of the tensor at the sender. */
  readonly from: MemoryKind;
  /** Memory the bytes land in at the receiver. */
  readonly to: MemoryKind;
  /** Why this side copies the bytes through a host bounce of its own, or undefined. */
  readonly bounce: string | undefined;
  /** Why gdrpc stages the transfer (this side's bounce, else what it knows of the other side's), or undefined. */
  readonly staged: string | undefined;
  /** Predicted from the endpoint's lanes and the memory types; 'staged' whenever `staged` is set. */
  readonly path: TransferPath;
  /** Whether a stream-ordered producer is awaited when the send starts rather than at encode: a
   *  tag send of the tensor itself reads it only then (a bounce or an inline copy reads it now). */
  readonly deferProducer: boolean;
  /** What the call fails with under noStaging, or undefined. */
  readonly refusal: GdrpcError | undefined;
}

/** The other end of the connection, as the plans need it. */
export interface PeerFacts {
  /** Its name in messages. */
  name: string;
  /** The endpoint to it: its lanes predict paths (asked only when a path is needed). */
  endpoint: Endpoint;
}

/** What the peer announced in its handshake, and this side's inline threshold toward it. */
export interface ReceiverFacts extends PeerFacts {
  inlineBytes: number;
  maxFrame: number;
  /** It receives @cuda tensors into GPU memory. */
  gpu: boolean;
  /** It stages what it receives into GPU memory through host memory (its UCX cannot map CUDA). */
  stages: boolean;
}

/** What the sender knows of one tensor it sends by value. */
export interface SendFacts {
  /** The argument's place in the message, for errors ("x", "items[2]"). */
  where: string;
  bytes: number;
  from: MemoryKind;
  /** The field's placement at the receiver ('host' or 'cuda'; remote handles move nothing). */
  placement: Placement;
  receiver: ReceiverFacts;
  policy: SendPolicy;
  /** Why this process's UCX cannot take the tensor's memory as it is (staging.ts), or undefined. */
  stagingReason(): string | undefined;
}

/** The descriptor fields a receiving plan reads. */
export type WireFacts = Pick<TensorWire, 'm' | 'n' | 'mt' | 'st'>;

/** What a receiver knows of an announced tensor before allocating for it. */
export interface ArrivalFacts {
  where: string;
  wire: WireFacts;
  placement: Placement;
  sender: PeerFacts;
  noStaging: boolean;
  /** Whether this process receives @cuda tensors into GPU memory (asked for @cuda fields only). */
  gpu(): boolean;
  /** Whether this process's UCX can register CUDA memory. */
  mapsCuda(): boolean;
}

/** What a receiver knows once the destination of an announced tensor is allocated. */
export interface ReceiveFacts {
  where: string;
  wire: WireFacts;
  /** The destination's device ('cpu' or 'cuda:N'). */
  device: string;
  sender: PeerFacts;
  noStaging: boolean;
  /** Why this process's UCX cannot take the destination's memory as it is (staging.ts), or undefined. */
  stagingReason(): string | undefined;
}

const MOVER_OF = { i: 'inline', t: 'tag', g: 'tag', r: 'rma' } as const;

/** The mover a descriptor of tensor bytes names (not a remote handle's). */
export function moverOf(wire: Pick<TensorWire, 'm'>): MoverName {
  return MOVER_OF[wire.m as 'i' | 't' | 'g' | 'r'];
}

/** The sender's plan: throws where the forced mover cannot carry the tensor (choose.ts). */
export function planSend(facts: SendFacts): TransferPlan {
  const { bytes, from, receiver, policy } = facts;
  // A receiver without CUDA takes @cuda tensors into host memory.
  const to = facts.placement.kind === 'cuda' && receiver.gpu ? 'cuda' : 'host';
  const mover = chooseMover(policy.mover, bytes, from, { inline: receiver.inlineBytes, maxFrame: receiver.maxFrame }).name;
  // Inline copies through the frame anyway; the other movers hand memory to UCX, which must be able to map it.
  const bounce = mover === 'inline' ? undefined : facts.stagingReason();
  const staged = bounce ?? (mover !== 'inline' && bytes > 0 && to === 'cuda' && receiver.stages
    ? `${receiver.name} cannot receive into CUDA memory without staging` : undefined);
  const path = staged !== undefined ? 'staged' : transferPath(mover, receiver.endpoint, from, to, bytes);
  const refusal = policy.noStaging && path === 'staged'
    ? new GdrpcError(Code.FAILED_PRECONDITION, `${facts.where}: ${from} -> ${to} over ${receiver.name} would stage through host memory (noStaging)${staged !== undefined ? `: ${staged}` : ''}`, { path })
    : undefined;
  return Object.freeze({ mover, bytes, from, to, bounce, staged, path, deferProducer: mover === 'tag' && bounce === undefined, refusal });
}

/** The receiver's plan when the frame is decoded: where the bytes will land and whether noStaging
 *  refuses them before anything is allocated. The sender's own staging (`st`) is left to the
 *  sender's policy here, as it has always been; `planReceive` reports it. */
export function planArrival(facts: ArrivalFacts): TransferPlan {
  const { wire } = facts;
  const mover = moverOf(wire);
  const from = kindOf(wire.mt);
  const to = facts.placement.kind === 'cuda' && facts.gpu() ? 'cuda' : 'host';
  const bounce = wire.n > 0 && wire.m !== 'i' && to === 'cuda' && !facts.mapsCuda() ? 'this UCX cannot register CUDA memory' : undefined;
  const path = once(() => bounce !== undefined ? 'staged' : transferPath(mover, facts.sender.endpoint, from, to, wire.n));
  const refusal = facts.noStaging && path() === 'staged'
    ? new GdrpcError(Code.FAILED_PRECONDITION, `${facts.where}: ${wire.mt} -> ${to} from ${facts.sender.name} would stage through host memory (noStaging)${bounce !== undefined ? `: ${bounce}` : ''}`, { path: 'staged' })
    : undefined;
  return new LazyPathPlan({ mover, bytes: wire.n, from, to, bounce, staged: bounce, deferProducer: false, refusal }, path);
}

/** The receiver's plan once its destination exists: whether it receives through a host bounce,
 *  and whether noStaging refuses that. */
export function planReceive(facts: ReceiveFacts): TransferPlan {
  const { wire } = facts;
  const mover = moverOf(wire);
  const from = kindOf(wire.mt);
  const to = facts.device === 'cpu' ? 'host' : 'cuda';
  const bounce = mover === 'inline' ? undefined : facts.stagingReason();
  const staged = bounce ?? (wire.st === true ? `${facts.sender.name} staged it through host memory` : undefined);
  const refusal = facts.noStaging && bounce !== undefined
    ? new GdrpcError(Code.FAILED_PRECONDITION, `${facts.where}: receiving into ${facts.device} would stage through host memory (noStaging): ${bounce}`, { path: 'staged' })
    : undefined;
  const path = once(() => staged !== undefined ? 'staged' : transferPath(mover, facts.sender.endpoint, from, to, wire.n));
  return new LazyPathPlan({ mover, bytes: wire.n, from, to, bounce, staged, deferProducer: false, refusal }, path);
}

function kindOf(memoryType: string): MemoryKind {
  return memoryType === 'cuda' ? 'cuda' : 'host';
}

function once<T>(compute: () => T): () => T {
  let done = false;
  let value!: T;
  return () => {
    if (!done) {
      value = compute();
      done = true;
    }
    return value;
  };
}

/** A receiver's plan whose path is predicted on first read: the lanes are asked then, as before.
 *  A class, not a frozen copy of the fields with a getter: that copy took 1.8-2.0 µs per tensor
 *  on each side of a call against 40-60 ns for this (CPU box, node micro-run). */
class LazyPathPlan implements TransferPlan {
  readonly mover: MoverName;
  readonly bytes: number;
  readonly from: MemoryKind;
  readonly to: MemoryKind;
  readonly bounce: string | undefined;
  readonly staged: string | undefined;
  readonly deferProducer: boolean;
  readonly refusal: GdrpcError | undefined;
  readonly #path: () => TransferPath;

  constructor(fields: Omit<TransferPlan, 'path'>, path: () => TransferPath) {
    this.mover = fields.mover;
    this.bytes = fields.bytes;
    this.from = fields.from;
    this.to = fields.to;
    this.bounce = fields.bounce;
    this.staged = fields.staged;
    this.deferProducer = fields.deferProducer;
    this.refusal = fields.refusal;
    this.#path = path;
    Object.freeze(this);
  }

  get path(): TransferPath { return this.#path(); }
}

