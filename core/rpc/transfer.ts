// The tensors of one frame: on the way out, a mover and a descriptor per tensor and the sends
// that follow the frame; on the way in, placeholders checked against limits and the descriptor,
// then allocation and receipt. Every transfer records its mover and path for callInfo(): the
// sender's from UCX's description of its send, the receiver's predicted (docs/gpu.md "Transfer paths").
import { Code, GdrpcError } from '../errors.ts';
import { elementSize, isDType, Tensor } from '../tensor/index.ts';
import { checkTensorWire } from '../wire/codec.ts';
import type { TensorWire } from '../wire/frames.ts';
import type { DType, Placement } from '../schema/descriptor.ts';
import { chooseMover, moverByName } from './movers/choose.ts';
import type { CudaEvent } from '../compute/stream.ts';
import { cuda } from '../cuda.ts';
import { cudaReceives, memoryTypeOf, ProducerSync } from './movers/memory.ts';
import type { Mover, MoverName, Outgoing, ProtocolSeen, TransferInfo, TransferScope } from './movers/mover.ts';
import { bounceFor, contextMapsCuda, stagingReason } from './movers/staging.ts';
import { transferPath } from './movers/path.ts';
import { parseProtocol, pathOfProtocol } from './movers/protocol.ts';
import { tensorTooLarge, type Side } from './memory-errors.ts';
import { RemoteTensor, exposeRemote } from './remote.ts';

/** How the sending side wants its tensors moved. */
export interface SendPolicy { mover: 'auto' | MoverName; noStaging: boolean }

/** Which side moves the tensors of a frame, and what names their fields in messages: `label`
 *  precedes a field's path ("Echo.echo arguments." + "x"). */
export interface TransferSite { side: Side; label: string }

const MOVER_OF = { i: 'inline', t: 'tag', r: 'rma' } as const;

/** One tensor on its way out: its send, its report, the memory at both ends, whether gdrpc stages it. */
interface Sending {
  outgoing: Outgoing; info: TransferInfo; from: 'host' | 'cuda'; to: 'host' | 'cuda'; staged: boolean;
  /** The producer of a stream-ordered tensor, awaited before its bytes go. */
  ready: CudaEvent | undefined;
}

/** Tensors leaving in one frame. */
export class OutgoingTensors {
  readonly transfers: TransferInfo[] = [];
  readonly #outgoing: Sending[] = [];
  /** Waits for the producers of CUDA tensors (memory.ts ProducerSync). */
  readonly #sync = new ProducerSync();
  /** Bounces to give back if the frame never leaves. */
  readonly #discards: Array<() => void> = [];

  constructor(private readonly scope: TransferScope, private readonly policy: SendPolicy, private readonly site: TransferSite) {}

  /** The EncodeTensor callback of encodeFields. */
  readonly encode = (value: unknown, where: string, placement: Placement): unknown => {
    if (value instanceof RemoteTensor) return value.wire;
    if (!(value instanceof Tensor)) throw new GdrpcError(Code.INVALID_ARGUMENT, `${where}: expected a Tensor`);
    if (placement.kind === 'remote') {
      this.#sync.before(value);
      return exposeRemote(value, this.scope);
    }
    const { connection } = this.scope;
    const from = memoryTypeOf(value);
    // Where the bytes land: a receiver without CUDA takes @cuda tensors into host memory.
    const to = placement.kind === 'cuda' && connection.peerLimits.gpu ? 'cuda' : 'host';
    const mover = chooseMover(this.policy.mover, value.byteLength, from, { inline: connection.inlineBytes, maxFrame: connection.peerLimits.maxFrame });
    // Inline copies through the frame anyway; the other movers hand memory to UCX, which must be able to map it.
    const local = mover.name === 'inline' ? undefined : stagingReason(value, connection.runtime.context);
    const reason = local ?? (mover.name !== 'inline' && value.byteLength > 0 && to === 'cuda' && connection.peerLimits.stages
      ? `${connection.peer} cannot receive into CUDA memory without staging` : undefined);
    const path = reason !== undefined ? 'staged' : transferPath(mover.name, connection.endpoint, from, to, value.byteLength);
    if (this.policy.noStaging && path === 'staged') {
      throw new GdrpcError(Code.FAILED_PRECONDITION, `${where}: ${from} -> ${to} over ${connection.peer} would stage through host memory (noStaging)${reason !== undefined ? `: ${reason}` : ''}`, { path });
    }
    if (value.byteLength > connection.peerLimits.maxTensor) {
      throw tensorTooLarge(this.site.side === 'client' ? 'server' : 'client', `${this.site.label}${where}`, value.byteLength, connection.peerLimits.maxTensor);
    }
    // A tag send reads the tensor only when it starts, after the frame: a stream-ordered tensor's
    // producer is awaited then, off the event loop. Every other path reads it from here on.
    const ready = this.#sync.before(value, { defer: mover.name === 'tag' && local === undefined });
    let outgoing: Outgoing;
    if (local !== undefined) {
      const staged = stagedOutgoing(value, mover, this.scope);
      this.#discards.push(staged.discard);
      outgoing = staged;
    } else {
      outgoing = mover.prepare(value, this.scope);
    }
    const info: TransferInfo = { argument: where, bytes: value.byteLength, mover: mover.name, path };
    this.#outgoing.push({ outgoing, info, from, to, staged: reason !== undefined, ready });
    this.transfers.push(info);
    return outgoing.wire;
  };

  /** Gives back what encode took for staging when the frame will not be sent (encoding failed
   *  midway, the call was aborted, the send failed); no-op for transfers already started. */
  discard(): void {
    for (const discard of this.#discards.splice(0)) discard();
  }

  /** Starts every transfer (after the frame went out); resolves when the memory may be reused.
   *  Each transfer's path then becomes what UCX says its send did; under noStaging a send that UCX
   *  moved through host memory rejects (the bytes have moved: the call fails). */
  start(): Promise<void> {
    this.#discards.length = 0;
    if (this.#outgoing.length === 0) return Promise.resolve();
    return Promise.all(this.#outgoing.map(async (entry) => {
      // A producer event closed meanwhile (its stream closed) says nothing any more: wait for the device.
      if (entry.ready?.closed === true) cuda.synchronize(entry.ready.device);
      else if (entry.ready !== undefined) await entry.ready.finished();
      this.#sent(entry, await entry.outgoing.start());
    })).then(() => undefined);
  }

  #sent({ info, from, to, staged }: Sending, seen: ProtocolSeen | void): void {
    if (seen === undefined || seen.protocol === '') return;
    info.protocol = seen.protocol;
    const parsed = parseProtocol(seen.protocol);
    if (staged || parsed === undefined) return;
    info.path = pathOfProtocol(parsed, from, to) ?? info.path;
    if (this.policy.noStaging && info.path === 'staged') {
      throw new GdrpcError(Code.FAILED_PRECONDITION, `${info.argument}: UCX moved ${from} -> ${to} over ${this.scope.connection.peer} through host memory (noStaging): ${parsed.text}`, { path: 'staged' });
    }
  }
}

/** A tensor announced in a received frame, not yet received. */
export class PendingTensor {
  constructor(readonly wire: TensorWire, readonly where: string, readonly placement: Placement) {}
  get dtype(): string { return this.wire.dt; }
  get shape(): readonly number[] { return this.wire.sh; }
}

/** Allocates the destination of an incoming tensor (possibly waiting for pool memory); `field`
 *  names it for messages ("Echo.echo arguments.x"). */
export type Allocate = (shape: number[], dtype: DType, placement: Placement, field: string) => Tensor | Promise<Tensor>;

/** Tensors arriving in one frame. */
export class IncomingTensors {
  readonly transfers: TransferInfo[] = [];
  readonly pending: PendingTensor[] = [];
  /** Tensors allocated here; the side that owns the call releases them. */
  readonly allocated: Tensor[] = [];

  constructor(private readonly scope: TransferScope, private readonly limits: { maxTensor: number; noStaging?: boolean }, private readonly site: TransferSite) {}

  /** The DecodeTensor callback of decodeFields: checks the descriptor before anything is allocated. */
  readonly decode = (value: unknown, where: string, placement: Placement): unknown => {
    const wire = checkTensorWire(value, where);
    if (!isDType(wire.dt)) throw new GdrpcError(Code.INVALID_ARGUMENT, `${where}: unknown dtype ${wire.dt}`);
    const numel = wire.sh.reduce((product, size) => product * size, 1);
    if (numel * elementSize(wire.dt) !== wire.n) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `${where}: ${wire.n} bytes do not match shape [${wire.sh.join(', ')}] of ${wire.dt}`);
    }
    // A handle where bytes are declared, or bytes where a handle is: the handler would get the
    // wrong kind of object.
    if ((wire.m === 'h') !== (placement.kind === 'remote')) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `${where}: ${wire.m === 'h' ? 'a remote handle where tensor bytes are declared' : 'tensor bytes where a remote handle is declared'}`);
    }
    if (wire.m === 'r' && !this.scope.connection.runtime.rma) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `${where}: RMA descriptor refused: this process does not perform RMA (docs/security.md)`);
    }
    const pending = new PendingTensor(wire, where, placement);
    this.pending.push(pending);
    if (wire.m === 'h') return new RemoteTensor(wire);
    // Its payload may come before the receive is posted (the allocation can wait): hold it.
    if (wire.m === 't') this.scope.connection.expect(wire.x!);
    if (this.limits.noStaging) {
      const to = placement.kind === 'cuda' && cudaReceives() ? 'cuda' : 'host';
      const context = this.scope.connection.runtime.context;
      const local = wire.n > 0 && wire.m !== 'i' && to === 'cuda' && !contextMapsCuda(context);
      const path = local ? 'staged' : transferPath(MOVER_OF[wire.m], this.scope.connection.endpoint, wire.mt === 'cuda' ? 'cuda' : 'host', to, wire.n);
      if (path === 'staged') {
        throw new GdrpcError(Code.FAILED_PRECONDITION, `${where}: ${wire.mt} -> ${to} from ${this.scope.connection.peer} would stage through host memory (noStaging)${local ? ': this UCX cannot register CUDA memory' : ''}`, { path });
      }
    }
    if (wire.n > this.limits.maxTensor) throw tensorTooLarge(this.site.side, `${this.site.label}${where}`, wire.n, this.limits.maxTensor);
    return pending;
  };

  /** Allocates and receives every pending tensor, replacing placeholders in `values`. On failure
   *  everything allocated is released and what was not received is refused. */
  async receive(allocate: Allocate): Promise<Map<PendingTensor, Tensor>> {
    const received = new Map<PendingTensor, Tensor>();
    const work = this.pending.filter((pending) => pending.wire.m !== 'h');
    let failure: unknown;
    await Promise.all(work.map(async (pending) => {
      const mover = moverByName(MOVER_OF[pending.wire.m as 'i' | 't' | 'r']);
      let dest: Tensor;
      try {
        if (failure !== undefined) throw failure;
        const allocated = allocate([...pending.wire.sh], pending.wire.dt as DType, pending.placement, `${this.site.label}${pending.where}`);
        dest = allocated instanceof Tensor ? allocated : await allocated;
        // Another tensor of this frame failed while this one waited for memory.
        if (failure !== undefined) {
          dest.release();
          throw failure;
        }
      } catch (error) {
        failure ??= error;
        await mover.refuse(pending.wire, this.scope);
        return;
      }
      this.allocated.push(dest);
      const reason = mover.name === 'inline' ? undefined : stagingReason(dest, this.scope.connection.runtime.context);
      if (reason !== undefined && this.limits.noStaging) {
        failure ??= new GdrpcError(Code.FAILED_PRECONDITION, `${pending.where}: receiving into ${dest.device} would stage through host memory (noStaging): ${reason}`, { path: 'staged' });
        await mover.refuse(pending.wire, this.scope);
        return;
      }
      try {
        const seen = reason !== undefined ? await stagedReceive(mover, pending.wire, dest, this.scope) : await mover.receive(pending.wire, dest, this.scope);
        received.set(pending, dest);
        const stagedBySender = pending.wire.st === true;
        this.transfers.push(receivedInfo(pending, mover.name, dest, seen, reason !== undefined || stagedBySender, this.scope));
      } catch (error) {
        failure ??= error;
      }
    }));
    if (failure !== undefined) {
      this.releaseAll();
      throw GdrpcError.from(failure);
    }
    return received;
  }

  releaseAll(): void {
    for (const tensor of this.allocated.splice(0)) tensor.release();
  }
}

/** What a receiver reports: RMA reads from UCX's description of the get (the reader ran it); tag
 *  receives from the lanes and the memory types, this side's as UCX detected it, because UCX
 *  describes a receive by its length and memory type only. */
function receivedInfo(pending: PendingTensor, mover: MoverName, dest: Tensor, seen: ProtocolSeen | void, staged: boolean, scope: TransferScope): TransferInfo {
  const info: TransferInfo = { argument: pending.where, bytes: pending.wire.n, mover, path: 'staged' };
  const parsed = seen === undefined || seen.protocol === '' ? undefined : parseProtocol(seen.protocol);
  if (seen !== undefined && seen.protocol !== '') info.protocol = seen.protocol;
  if (staged) return info;
  const from = pending.wire.mt === 'cuda' ? 'cuda' : 'host';
  const detected = parsed?.memoryType;
  const to = detected === 'host' || detected === 'cuda' ? detected : memoryTypeOf(dest);
  info.path = (parsed !== undefined ? pathOfProtocol(parsed, to, from) : undefined)
    ?? transferPath(mover, scope.connection.endpoint, from, to, pending.wire.n);
  return info;
}

/** Sends `tensor` through a host bounce: copied out now (the frame's descriptor then names host
 *  memory, which is what UCX reads), the bounce released once the mover is done with it. */
function stagedOutgoing(tensor: Tensor, mover: Mover, scope: TransferScope): Outgoing & { discard(): void } {
  const bounce = bounceFor(tensor, scope.connection.runtime);
  let outgoing: Outgoing;
  try {
    bounce.copyFrom(tensor);
    outgoing = mover.prepare(bounce, scope);
  } catch (error) {
    bounce.release();
    throw error;
  }
  let started = false;
  // `st` tells the receiver the bytes went through host memory on this side (docs/wire.md).
  return {
    wire: { ...outgoing.wire, st: true },
    start: () => {
      started = true;
      return outgoing.start().finally(() => bounce.release());
    },
    // The frame never left: nobody will read the bounce (an RMA exposure goes with the call).
    discard: () => { if (!started) bounce.release(); },
  };
}

/** Receives into a host bounce, then copies into `dest`. */
async function stagedReceive(mover: Mover, wire: TensorWire, dest: Tensor, scope: TransferScope): Promise<ProtocolSeen | void> {
  const bounce = bounceFor(dest, scope.connection.runtime);
  try {
    const seen = await mover.receive(wire, bounce, scope);
    dest.copyFrom(bounce);
    return seen;
  } finally {
    bounce.release();
  }
}

/** The placeholders of a decoded frame whose descriptors arrived, even if decoding failed midway. */
export function refuseRaw(scope: TransferScope, wireObject: unknown): Promise<void> {
  // A frame rejected before decoding still announced tag payloads and exposures: settle them so
  // that the sender completes. Walk generically for anything shaped like a descriptor.
  const found: TensorWire[] = [];
  const walk = (value: unknown): void => {
    if (Array.isArray(value)) value.forEach(walk);
    else if (typeof value === 'object' && value !== null && !(value instanceof Uint8Array)) {
      const record = value as Record<string, unknown>;
      if ((record.m === 't' || record.m === 'r') && typeof record.x === 'number') found.push(record as unknown as TensorWire);
      else Object.values(record).forEach(walk);
    }
  };
  walk(wireObject);
  return Promise.all(found.map((wire) => moverByName(wire.m === 't' ? 'tag' : 'rma').refuse(wire, scope))).then(() => undefined);
}
