// The tensors of one frame: on the way out, a mover and a descriptor per tensor and the sends
// that follow the frame; on the way in, placeholders checked against limits and the descriptor,
// then allocation and receipt. Each side takes its decisions from one plan per tensor
// (movers/plan.ts) and records mover and path for callInfo() (movers/report.ts).
import { Code, GdrpcError } from '../../errors.ts';
import { elementSize, isDType, Tensor } from '../../tensor/index.ts';
import { checkTensorWire } from '../../wire/codec.ts';
import type { DType, Placement } from '../../schema/descriptor.ts';
import { moverByName } from '../movers/choose.ts';
import type { CudaEvent } from '../../compute/stream.ts';
import { ProducerSync, producerDone } from '../movers/memory.ts';
import { cudaReceives, memoryTypeOf } from '../runtime/memory-support.ts';
import type { Mover, Outgoing, ProtocolSeen, TransferInfo, TransferScope } from '../movers/mover.ts';
import { moverOf, planArrival, planReceive, planSend, type PeerFacts, type SendPolicy, type TransferPlan } from '../movers/plan.ts';
import { applySenderReport, plannedInfo, reportReceived, reportSent } from '../movers/report.ts';
import { parseProtocol } from '../movers/protocol.ts';
import { bounceFor, stagingReason } from '../movers/staging.ts';
import { tensorTooLarge, type Side } from './memory-errors.ts';
import { checkGathers, gatherable, gatherChunks, gatheredOutgoing, stagingTensor, type Gather } from './gather.ts';
import { FrameKind, type TensorWire } from '../../wire/frames.ts';
import { awaitingReport } from '../movers/call-info.ts';
import { RemoteTensor, exposeRemote, type OwnerDialer } from '../remote/remote.ts';

export type { SendPolicy } from '../movers/plan.ts';

/** Which side moves the tensors of a frame, and what names their fields in messages: `label`
 *  precedes a field's path ("Echo.echo arguments." + "x"). */
export interface TransferSite { side: Side; label: string }

/** A receiving site also says how remote handles that arrive there are pulled. */
export interface IncomingSite extends TransferSite { dialOwner: OwnerDialer }

/** One send on its way out (one tensor, or the tensors of a gather): the send, their reports
 *  and the plan of the first. */
interface Sending {
  outgoing: Outgoing; infos: TransferInfo[]; plan: TransferPlan;
  /** The producer of a stream-ordered tensor, awaited before its bytes go. */
  ready: CudaEvent | undefined;
}

/** A tensor that may share a tag message with others, until finish() decides. */
interface GatherCandidate { tensor: Tensor; wire: TensorWire; info: TransferInfo; plan: TransferPlan }

/** Tensors leaving in one frame. */
export class OutgoingTensors {
  readonly transfers: TransferInfo[] = [];
  readonly #outgoing: Sending[] = [];
  /** Waits for the producers of CUDA tensors (memory.ts ProducerSync). */
  readonly #sync = new ProducerSync();
  /** Bounces to give back if the frame never leaves. */
  readonly #discards: Array<() => void> = [];
  /** Tensors that may share a tag message (mover `g`), by device and byte length. */
  readonly #candidates = new Map<string, GatherCandidate[]>();

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
    const plan = planSend({
      where, bytes: value.byteLength, from: memoryTypeOf(value), placement, policy: this.policy,
      receiver: { name: connection.peer, endpoint: connection.endpoint, inlineBytes: connection.inlineBytes, maxFrame: connection.peerLimits.maxFrame, gpu: connection.peerLimits.gpu, stages: connection.peerLimits.stages === true },
      stagingReason: () => stagingReason(value, connection.runtime),
    });
    if (plan.refusal !== undefined) throw plan.refusal;
    if (value.byteLength > connection.peerLimits.maxTensor) {
      throw tensorTooLarge(this.site.side === 'client' ? 'server' : 'client', `${this.site.label}${where}`, value.byteLength, connection.peerLimits.maxTensor);
    }
    if (gatherable(plan, value.device, connection.peerLimits.gathers === true)) {
      // Its descriptor is completed by finish(), once the frame's other tensors are known.
      const wire = { dt: value.dtype, sh: [...value.shape], n: value.byteLength, mt: memoryTypeOf(value), m: 't' } as TensorWire;
      const info = plannedInfo(where, plan);
      // Same memory, same length, and the same placement at the receiver (so one device there).
      const key = `${value.device}/${value.byteLength}/${placement.kind}/${placement.kind === 'cuda' ? placement.device ?? '' : ''}`;
      const group = this.#candidates.get(key);
      if (group === undefined) this.#candidates.set(key, [{ tensor: value, wire, info, plan }]);
      else group.push({ tensor: value, wire, info, plan });
      this.transfers.push(info);
      return wire;
    }
    // A deferred producer is awaited when the send starts, after the frame, off the event loop.
    const ready = this.#sync.before(value, { defer: plan.deferProducer });
    const mover = moverByName(plan.mover);
    let outgoing: Outgoing;
    if (plan.bounce !== undefined) {
      const staged = stagedOutgoing(value, mover, this.scope);
      this.#discards.push(staged.discard);
      outgoing = staged;
    } else {
      outgoing = mover.prepare(value, this.scope);
    }
    const info = plannedInfo(where, plan);
    this.#outgoing.push({ outgoing, infos: [info], plan, ready });
    this.transfers.push(info);
    return outgoing.wire;
  };

  /** Completes the descriptors encode left open: tensors of one device and byte length share a
   *  tag message (mover `g`) when there are two or more, else each goes on its own. Call once
   *  every tensor of the frame is encoded, before the frame is sent. */
  finish(): void {
    const { connection } = this.scope;
    for (const group of this.#candidates.values()) {
      for (const chunk of gatherChunks(group, group[0]!.plan.bytes, connection.peerLimits.maxTensor)) {
        if (chunk.length === 1) {
          const { tensor, wire, info, plan } = chunk[0]!;
          const ready = this.#sync.before(tensor, { defer: plan.deferProducer });
          const outgoing = moverByName('tag').prepare(tensor, this.scope);
          Object.assign(wire, outgoing.wire);
          this.#outgoing.push({ outgoing, infos: [info], plan, ready });
          continue;
        }
        const x = connection.transfers.next();
        const bytes = chunk[0]!.plan.bytes;
        for (const [k, { wire, info }] of chunk.entries()) {
          Object.assign(wire, { m: 'g', x, f: k * bytes });
          info.gathered = chunk.length;
        }
        const outgoing = gatheredOutgoing(chunk.map((c) => c.tensor), bytes, x, this.scope);
        this.#outgoing.push({ outgoing, infos: chunk.map((c) => c.info), plan: chunk[0]!.plan, ready: undefined });
      }
    }
    this.#candidates.clear();
  }

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
      if (entry.ready !== undefined) await producerDone(entry.ready);
      const seen = await entry.outgoing.start();
      this.#report(entry, seen);
      reportSent(entry.infos, entry.plan, seen, this.policy.noStaging, this.scope.connection.peer);
    })).then(() => undefined);
  }

  /** Tells the receiver of a completed tag send how UCX moved it (SENT): a receive cannot ask.
   *  Under noStaging the receiver waits for it, so it goes at once; otherwise it rides along
   *  with the next frame (Connection.sendSoon). */
  #report(entry: Sending, seen: ProtocolSeen | void): void {
    const { connection, call } = this.scope;
    if (entry.plan.mover !== 'tag' || connection.peerLimits.reports !== true || !connection.isOpen) return;
    const body = { x: entry.outgoing.wire.x!, p: seen?.protocol ?? '' };
    if (this.policy.noStaging) {
      connection.send(FrameKind.Sent, call, body).catch(() => { /* the connection is gone: the receiver's wait ends with it */ });
    } else {
      connection.sendSoon(FrameKind.Sent, call, body);
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

/** An announced tensor whose bytes follow (not a remote handle). */
const carriesBytes = (pending: PendingTensor): boolean => pending.wire.m !== 'h';

/** Tensors arriving in one frame. */
export class IncomingTensors {
  readonly transfers: TransferInfo[] = [];
  readonly pending: PendingTensor[] = [];
  /** Tensors allocated here; the side that owns the call releases them. */
  readonly allocated: Tensor[] = [];

  constructor(private readonly scope: TransferScope, private readonly limits: { maxTensor: number; noStaging?: boolean }, private readonly site: IncomingSite) {}

  /** Whether any announced tensor carries bytes to receive (remote handles carry none). */
  get hasBytes(): boolean { return this.pending.some(carriesBytes); }

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
    if (wire.m === 'g' && !this.scope.connection.runtime.gathers) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `${where}: a gathered tensor (mover g) to a process that did not announce gathers (GDRPC_GATHER=0)`);
    }
    if (wire.m === 'r' && !this.scope.connection.runtime.rma) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `${where}: RMA descriptor refused: this process does not perform RMA (docs/security.md)`);
    }
    const pending = new PendingTensor(wire, where, placement);
    this.pending.push(pending);
    if (wire.m === 'h') return new RemoteTensor(wire, this.site.dialOwner);
    const { connection } = this.scope;
    if (wire.m === 't' || wire.m === 'g') {
      // Its payload may come before the receive is posted (the allocation can wait): hold it.
      // (The tensors of a gather share one payload: expecting it again changes nothing.)
      connection.expect(wire.x!);
      // And the sender's report of it after its send completed (SENT), whatever this side does.
      if (connection.peerLimits.reports === true) connection.reports.expect(wire.x!);
    }
    const plan = planArrival({
      where, wire, placement, sender: this.#sender(), noStaging: this.limits.noStaging === true,
      gpu: cudaReceives, mapsCuda: () => connection.runtime.mapsCuda,
    });
    if (plan.refusal !== undefined) throw plan.refusal;
    if (wire.n > this.limits.maxTensor) throw tensorTooLarge(this.site.side, `${this.site.label}${where}`, wire.n, this.limits.maxTensor);
    return pending;
  };

  #gathers: Gather<PendingTensor>[] | undefined;

  /** Checks the gathered descriptors of the frame against each other (docs/wire.md mover `g`);
   *  call once decoding is done, where a decoding failure is handled (the frame's payloads are
   *  refused and the call fails at once). */
  checkGathers(): void {
    this.#gathers ??= checkGathers(this.pending, this.limits.maxTensor, this.site.label);
  }

  /** Allocates and receives every pending tensor, replacing placeholders in `values`. On failure
   *  everything allocated is released and what was not received is refused. */
  async receive(allocate: Allocate): Promise<Map<PendingTensor, Tensor>> {
    const received = new Map<PendingTensor, Tensor>();
    const work = this.pending.filter(carriesBytes);
    let failure: unknown;
    let gathers: Gather<PendingTensor>[];
    try {
      this.checkGathers();
      gathers = this.#gathers!;
    } catch (error) {
      failure = error;
      // Refuse each gathered payload once (the loop below refuses the single transfers).
      const xs = new Set(work.filter((p) => p.wire.m === 'g').map((p) => p.wire.x!));
      gathers = [...xs].map((x) => ({ x, bytes: 0, members: [] }));
    }
    const gatheredWork = gathers.map((gather) => this.#receiveGather(gather, allocate, received, () => failure, (error) => { failure ??= error; }));
    await Promise.all([...gatheredWork, ...work.filter((p) => p.wire.m !== 'g').map(async (pending) => {
      const mover = moverByName(moverOf(pending.wire));
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
        await this.#refuse(mover, pending.wire);
        return;
      }
      this.allocated.push(dest);
      const plan = planReceive({
        where: pending.where, wire: pending.wire, device: dest.device, sender: this.#sender(), noStaging: this.limits.noStaging === true,
        stagingReason: () => stagingReason(dest, this.scope.connection.runtime),
      });
      if (plan.refusal !== undefined) {
        failure ??= plan.refusal;
        await this.#refuse(mover, pending.wire);
        return;
      }
      try {
        const seen = plan.bounce !== undefined ? await stagedReceive(mover, pending.wire, dest, this.scope) : await mover.receive(pending.wire, dest, this.scope);
        received.set(pending, dest);
        const info = reportReceived(pending.where, plan, seen);
        this.transfers.push(info);
        if (pending.wire.m === 't') this.#awaitReport([info], plan, pending.wire.x!);
      } catch (error) {
        failure ??= error;
        if (pending.wire.m === 't') this.scope.connection.reports.forget(pending.wire.x!);
      }
    })]);
    if (failure !== undefined) {
      this.releaseAll();
      throw GdrpcError.from(failure);
    }
    return received;
  }

  releaseAll(): void {
    for (const tensor of this.allocated.splice(0)) tensor.release();
  }

  /** Resolves once every tag transfer of this frame has its sender's report (or none will come).
   *  Under noStaging it rejects when a report says UCX moved the bytes through host memory, or
   *  when a sender that promised reports (`rep`) sent none within transferTimeoutMs or before the
   *  connection closed: the bytes have arrived, but nothing confirms how, and the call fails. */
  async confirm(): Promise<void> {
    if (this.#reports.length > 0) await Promise.all(this.#reports);
    if (this.limits.noStaging !== true) return;
    const staged = this.transfers.find((info) => info.source === 'sender' && info.path === 'staged');
    if (staged !== undefined) {
      throw new GdrpcError(Code.FAILED_PRECONDITION, `${this.site.label}${staged.argument}: UCX moved it from ${this.scope.connection.peer} through host memory (noStaging), as the sender reported: ${staged.protocol}`, { path: 'staged' });
    }
    const unreported = this.#unreported[0];
    if (unreported !== undefined) {
      const { connection } = this.scope;
      const why = connection.isOpen ? `within ${connection.transferTimeoutMs} ms` : 'before the connection closed';
      throw new GdrpcError(Code.FAILED_PRECONDITION, `${this.site.label}${unreported.argument}: ${connection.peer} sent no report of how UCX moved it ${why}: noStaging cannot be confirmed`, { path: unreported.path });
    }
  }

  readonly #reports: Array<Promise<void>> = [];
  /** Tag transfers whose sender promised a report and sent none. */
  readonly #unreported: TransferInfo[] = [];

  /** Completes `infos` (one transfer's, or a gather's) when the sender's report of `transfer` comes. */
  #awaitReport(infos: TransferInfo[], plan: TransferPlan, transfer: number): void {
    const { connection } = this.scope;
    if (connection.peerLimits.reports !== true) return;
    const reported = connection.reports.take(transfer).then((report) => {
      for (const info of infos) {
        if (report === undefined) this.#unreported.push(info);
        else applySenderReport(info, plan, report, (text) => connection.reports.reading(text, parseProtocol));
      }
    });
    for (const info of infos) awaitingReport(info, reported);
    this.#reports.push(reported);
  }

  /** Receives a gathered payload: allocates each member's destination and a staging tensor for
   *  the whole message, takes the message into the staging tensor, and copies each member out
   *  (one block-copy kernel on a GPU). A failure anywhere is the frame's: what was allocated goes
   *  back with the rest, and a payload not received is refused. */
  async #receiveGather(gather: Gather<PendingTensor>, allocate: Allocate, received: Map<PendingTensor, Tensor>, failed: () => unknown, fail: (error: unknown) => void): Promise<void> {
    const { connection } = this.scope;
    const { x, bytes, members } = gather;
    const tag = moverByName('tag');
    const refuse = (): Promise<void> => {
      connection.reports.forget(x);
      return tag.refuse({ dt: 'u8', sh: [0], n: 0, mt: 'host', m: 't', x }, this.scope);
    };
    if (failed() !== undefined || members.length === 0) return refuse();
    const first = members[0]!;
    const dests: Tensor[] = [];
    let staging: Tensor | undefined;
    try {
      for (const member of members) {
        const allocated = allocate([...member.wire.sh], member.wire.dt as DType, member.placement, `${this.site.label}${member.where}`);
        const dest = allocated instanceof Tensor ? allocated : await allocated;
        dests.push(dest);
        this.allocated.push(dest);
        if (failed() !== undefined) throw failed();
      }
      // The message lands in the runtime's staging memory on the first destination's device
      // (members placed elsewhere are copied out block by block). On a server that is not the
      // receiving pool, whose room is the callers' limit; it is held only until copied out, and
      // since every destination is held first, staging in use stays under what they hold.
      staging = stagingTensor(connection.runtime, dests[0]!.device, members.length * bytes);
      if (failed() !== undefined) throw failed();
    } catch (error) {
      staging?.release();
      fail(error);
      await refuse();
      return;
    }
    const total = members.length * bytes;
    const wire: TensorWire = { dt: 'u8', sh: [total], n: total, mt: first.wire.mt, m: 't', x };
    const plan = planReceive({
      where: first.where, wire, device: staging.device, sender: this.#sender(), noStaging: this.limits.noStaging === true,
      stagingReason: () => stagingReason(staging!, connection.runtime),
    });
    try {
      if (plan.refusal !== undefined) {
        fail(plan.refusal);
        await refuse();
        return;
      }
      const seen = plan.bounce !== undefined ? await stagedReceive(tag, wire, staging, this.scope) : await tag.receive(wire, staging, this.scope);
      // UCX finished writing the staging tensor: its bytes are complete.
      await connection.runtime.blocks.copy(bytes, members.map((_, k) => ({ dst: dests[k]!, dstOffset: 0, src: staging!, srcOffset: k * bytes })), { sourcesReady: true });
      const infos = members.map((member, k) => {
        received.set(member, dests[k]!);
        const info = reportReceived(member.where, plan, seen);
        info.bytes = bytes;
        info.gathered = members.length;
        this.transfers.push(info);
        return info;
      });
      this.#awaitReport(infos, plan, x);
    } catch (error) {
      fail(error);
      connection.reports.forget(x);
    } finally {
      staging.release();
    }
  }

  /** Declines an announced tensor; its sender's report is not wanted either. */
  #refuse(mover: Mover, wire: TensorWire): Promise<void> {
    if (wire.m === 't') this.scope.connection.reports.forget(wire.x!);
    return mover.refuse(wire, this.scope);
  }

  #sender(): PeerFacts {
    return { name: this.scope.connection.peer, endpoint: this.scope.connection.endpoint };
  }
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
      if ((record.m === 't' || record.m === 'g' || record.m === 'r') && typeof record.x === 'number') found.push(record as unknown as TensorWire);
      else Object.values(record).forEach(walk);
    }
  };
  walk(wireObject);
  // The tensors of a gather share one payload: a payload id is refused once, whatever claims it.
  const payloads = new Set<number>();
  const refusals = found.filter((wire) => {
    if (wire.m === 'r') return true;
    if (payloads.has(wire.x!)) return false;
    payloads.add(wire.x!);
    return true;
  });
  for (const wire of refusals) if (wire.m !== 'r') scope.connection.reports.forget(wire.x!);
  return Promise.all(refusals.map((wire) => moverByName(wire.m === 'r' ? 'rma' : 'tag').refuse(wire, scope))).then(() => undefined);
}
