// The tensors of one frame on the way in: placeholders checked against limits and the
// descriptor, then allocation and receipt (gathered messages scattered, gather.ts), and the
// sender's reports awaited. Each side takes its decisions from one plan per tensor
// (movers/plan.ts) and records mover and path for callInfo() (movers/report.ts); the way out is
// outgoing.ts.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Code, GdrpcError } from '../../errors.ts';
import { elementSize, isDType, Tensor } from '../../tensor/index.ts';
import { checkTensorWire } from '../../wire/codec.ts';
import { MAX_TENSORS_PER_FRAME, type TensorWire } from '../../wire/frames.ts';
import type { DType, Placement } from '../../schema/descriptor.ts';
import { moverByName } from '../movers/choose.ts';
import { cudaReceives } from '../runtime/memory-support.ts';
import type { Mover, ProtocolSeen, TransferInfo, TransferScope } from '../movers/mover.ts';
import { moverOf, planArrival, planReceive, type PeerFacts, type TransferPlan } from '../movers/plan.ts';
import { applySenderReport, reportReceived } from '../movers/report.ts';
import { bounceFor, stagingReason } from '../movers/staging.ts';
import { heldPayloadDropped, resultsTooLarge, streamItemsTooLarge, tensorTooLarge, type Side } from './memory-errors.ts';
import { checkGathers, stagingTensor, type Gather } from './gather.ts';
import { ReceiveSlices } from './receive-slices.ts';
import { awaitingReport } from '../movers/call-info.ts';
import { RemoteTensor } from '../remote/remote.ts';
import type { OwnerDialer } from '../remote/owner-client.ts';
import { isLent } from '../remote/lent.ts';

export { RECEIVE_SLICE } from './receive-slices.ts';

export type { SendPolicy } from '../movers/plan.ts';

/** Which side moves the tensors of a frame, and what names their fields in messages: `label`
 *  precedes a field's path ("Echo.echo arguments." + "x"). */
export interface TransferSite { side: Side; label: string }

/** A receiving site also says how remote handles that arrive there are pulled. */
export interface IncomingSite extends TransferSite {
  dialOwner: OwnerDialer;
  /** The call's handler already runs (a client stream's items): a failure here is not one of a
   *  call that never ran. */
  running?: boolean;
}

/** A tensor announced in a received frame, not yet received. */
export class PendingTensor {
  constructor(readonly wire: TensorWire, readonly where: string, readonly placement: Placement) {}
  get dtype(): string { return this.wire.dt; }
  get shape(): readonly number[] { return this.wire.sh; }
}

/** Allocates the destination of an incoming tensor (possibly waiting for pool memory); `field`
 *  names it for messages ("Echo.echo arguments.x"); `countAs`: what a wait for it counts in the
 *  pool's queue when more than its bytes (a gather's members still to come). */
export type Allocate = (shape: number[], dtype: DType, placement: Placement, field: string, countAs?: number) => Tensor | Promise<Tensor>;

/** The error for a frame carrying more than MAX_TENSORS_PER_FRAME tensors. */
export function tooManyTensors(what: string): GdrpcError {
  return new GdrpcError(Code.RESOURCE_EXHAUSTED, `${what}: more than ${MAX_TENSORS_PER_FRAME} tensors in one frame`);
}

/** Largest transfer id of a tag payload (`x` of movers t and g): 32 bits of the payload's tag. */
export const MAX_TRANSFER_ID = 0xffff_ffff;

/** An announced tensor whose bytes follow (not a remote handle). */
const carriesBytes = (pending: PendingTensor): boolean => pending.wire.m !== 'h';

/** Tensors arriving in one frame. */
export class IncomingTensors {
  readonly transfers: TransferInfo[] = [];
  readonly pending: PendingTensor[] = [];
  /** Tensors allocated here; the side that owns the call releases them. */
  readonly allocated: Tensor[] = [];

  /** Bytes of the tensors announced so far (remote handles carry none). */
  #bytes = 0;

  /** `maxTotal`: the most bytes the frame's tensors may come to (a client's maxResultBytes), with
   *  `held` bytes already held against it (a server stream's items not yet taken). */
  constructor(private readonly scope: TransferScope, private readonly limits: { maxTensor: number; maxTotal?: number; held?: number; noStaging?: boolean }, private readonly site: IncomingSite) {}

  /** Bytes of the tensors announced (remote handles carry none). */
  get bytes(): number { return this.#bytes; }

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
    // A payload's tag holds 32 bits of its transfer id (wire/tag.ts dataTag): x and x + 2^32 would
    // name one payload and slip past the check for an id received twice (Payloads.watchTransfer).
    if ((wire.m === 't' || wire.m === 'g') && wire.x! > MAX_TRANSFER_ID) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `${where}: transfer id ${wire.x} is past ${MAX_TRANSFER_ID}`);
    }
    if (this.pending.length >= MAX_TENSORS_PER_FRAME) throw tooManyTensors(`${this.site.label}${where}`);
    const pending = new PendingTensor(wire, where, placement);
    this.pending.push(pending);
    if (wire.m === 'h') return new RemoteTensor(wire, this.site.dialOwner);
    const { connection } = this.scope;
    if (wire.m === 't' || wire.m === 'g') {
      // Its payload came before this frame and was dropped (runtime/held-bytes.ts): the call
      // fails, and the frame's refusal matches nothing for it (tag.ts refuse).
      const dropped = connection.payloads.dropped(wire.x!);
      if (dropped !== undefined) throw heldPayloadDropped(this.site.side, `${this.site.label}${where}`, wire.n, dropped, connection.runtime.heldBytes.limit, this.site.side === 'client' || this.site.running === true);
      // Its payload may come before the receive is posted (the allocation can wait): hold it.
      // (The tensors of a gather share one payload: expecting it again changes nothing.)
      connection.payloads.expect(wire.x!, wire.n);
      // And the sender's report of it after its send completed (SENT), whatever this side does.
      if (connection.peerLimits.reports === true) connection.reports.expect(wire.x!);
    }
    const plan = planArrival({
      where, wire, placement, sender: this.#sender(), noStaging: this.limits.noStaging === true,
      gpu: cudaReceives, mapsCuda: () => connection.runtime.mapsCuda,
    });
    if (plan.refusal !== undefined) throw plan.refusal;
    if (wire.n > this.limits.maxTensor) throw tensorTooLarge(this.site.side, `${this.site.label}${where}`, wire.n, this.limits.maxTensor);
    this.#bytes += wire.n;
    const held = this.limits.held ?? 0;
    if (this.#bytes + held > (this.limits.maxTotal ?? Infinity)) {
      throw held > 0 ? streamItemsTooLarge(`${this.site.label}${where}`, held, this.#bytes, this.limits.maxTotal!) : resultsTooLarge(`${this.site.label}${where}`, this.#bytes, this.limits.maxTotal!);
    }
    return pending;
  };

  #gathers: Gather<PendingTensor>[] | undefined;

  /** Checks the gathered descriptors of the frame against each other (docs/wire.md mover `g`),
   *  and the payloads that came before the frame against the bytes it announced (a gather's
   *  tensors add up); call once decoding is done, where a decoding failure is handled (the
   *  frame's payloads are refused and the call fails at once). */
  checkDecoded(): void {
    if (this.#gathers !== undefined) return;
    const { payloads } = this.scope.connection;
    for (const { wire } of this.pending) if (wire.m === 't' || wire.m === 'g') payloads.checkAnnounced(wire.x!);
    this.#gathers = checkGathers(this.pending, this.limits.maxTensor, this.site.label);
  }

  /** Allocates and receives every pending tensor, replacing placeholders in `values`. On failure
   *  everything allocated is released and what was not received is refused. */
  async receive(allocate: Allocate): Promise<Map<PendingTensor, Tensor>> {
    const received = new Map<PendingTensor, Tensor>();
    const work = this.pending.filter(carriesBytes);
    let failure: unknown;
    let gathers: Gather<PendingTensor>[];
    try {
      this.checkDecoded();
      gathers = this.#gathers!;
    } catch (error) {
      failure = error;
      // Refuse each gathered payload once (the loop below refuses the single transfers).
      const xs = new Set(work.filter((p) => p.wire.m === 'g').map((p) => p.wire.x!));
      gathers = [...xs].map((x) => ({ x, bytes: 0, members: [] }));
    }
    const failed = (): unknown => failure;
    const fail = (error: unknown): void => { failure ??= error; };
    const slices = new ReceiveSlices();
    for (const gather of gathers) {
      if (slices.full(gather.members.length)) {
        slices.end();
        // A failure of one tensor fails the frame: what is not yet started is refused without
        // waiting for more turns.
        if (failure === undefined) await nextTurn();
      }
      slices.add(this.#receiveGather(gather, allocate, received, failed, fail), Math.max(1, gather.members.length));
    }
    for (const pending of work) {
      if (pending.wire.m === 'g') continue;
      if (slices.full(1)) {
        slices.end();
        if (failure === undefined) await nextTurn();
      }
      slices.add(this.#receiveOne(pending, allocate, received, failed, fail), 1);
    }
    await slices.all();
    if (failure !== undefined) {
      this.releaseAll();
      throw GdrpcError.from(failure);
    }
    return received;
  }

  releaseAll(): void {
    for (const tensor of this.allocated.splice(0)) if (!isLent(tensor)) tensor.release();
  }

  /** Takes the tensors allocated here out (lent ones left out: they are their lender's): whoever
   *  owns the call releases them; this object may then go. */
  takeAllocated(): Tensor[] {
    return this.allocated.splice(0).filter((tensor) => !isLent(tensor));
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
        else applySenderReport(info, plan, report, connection.reports);
      }
    });
    for (const info of infos) awaitingReport(info, reported);
    this.#reports.push(reported);
  }

  /** Allocates one announced tensor's destination and receives its bytes there. A failure
   *  anywhere is the frame's (`fail`); once the frame failed (`failed`), what is not yet received
   *  is refused. */
  async #receiveOne(pending: PendingTensor, allocate: Allocate, received: Map<PendingTensor, Tensor>, failed: () => unknown, fail: (error: unknown) => void): Promise<void> {
    const mover = moverByName(moverOf(pending.wire));
    let dest: Tensor;
    try {
      if (failed() !== undefined) throw failed();
      const allocated = allocate([...pending.wire.sh], pending.wire.dt as DType, pending.placement, `${this.site.label}${pending.where}`);
      dest = allocated instanceof Tensor ? allocated : await allocated;
      // Another tensor of this frame failed while this one waited for memory.
      if (failed() !== undefined) {
        dest.release();
        throw failed();
      }
    } catch (error) {
      fail(error);
      await this.#refuse(mover, pending.wire);
      return;
    }
    this.allocated.push(dest);
    const plan = planReceive({
      where: pending.where, wire: pending.wire, device: dest.device, sender: this.#sender(), noStaging: this.limits.noStaging === true,
      stagingReason: () => stagingReason(dest, this.scope.connection.runtime),
    });
    if (plan.refusal !== undefined) {
      fail(plan.refusal);
      await this.#refuse(mover, pending.wire);
      return;
    }
    try {
      const seen = await receiveAsPlanned(mover, pending.wire, dest, plan, this.scope);
      received.set(pending, dest);
      const info = reportReceived(pending.where, plan, seen, this.scope.connection.reports);
      this.transfers.push(info);
      if (pending.wire.m === 't') this.#awaitReport([info], plan, pending.wire.x!);
    } catch (error) {
      fail(error);
      if (pending.wire.m === 't') this.scope.connection.reports.forget(pending.wire.x!);
    }
  }

  /** Receives a gathered payload: allocates each member's destination and a staging tensor for
   *  the whole message, takes the message into the staging tensor, and copies each member out
   *  (one block-copy kernel on a GPU). A failure anywhere is the frame's: what was allocated goes
   *  back with the rest, and a payload not received is refused. */
  async #receiveGather(gather: Gather<PendingTensor>, allocate: Allocate, received: Map<PendingTensor, Tensor>, failed: () => unknown, fail: (error: unknown) => void): Promise<void> {
    const { connection } = this.scope;
    const { x, bytes, members } = gather;
    const tag = moverByName('tag');
    const refuse = (): Promise<void> => this.#refuse(tag, { dt: 'u8', sh: [0], n: 0, mt: 'host', m: 't', x });
    if (failed() !== undefined || members.length === 0) return refuse();
    const first = members[0]!;
    const dests: Tensor[] = [];
    let staging: Tensor | undefined;
    try {
      for (const [k, member] of members.entries()) {
        // A wait counts the members still to come: the payload is held whole meanwhile.
        const allocated = allocate([...member.wire.sh], member.wire.dt as DType, member.placement, `${this.site.label}${member.where}`, (members.length - k) * bytes);
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
      const seen = await receiveAsPlanned(tag, wire, staging, plan, this.scope);
      // UCX finished writing the staging tensor: its bytes are complete.
      await connection.runtime.blocks.copy(bytes, members.map((_, k) => ({ dst: dests[k]!, dstOffset: 0, src: staging!, srcOffset: k * bytes })), { sourcesReady: true });
      this.#gatherReceived(members, dests, received, plan, seen, x, bytes);
    } catch (error) {
      fail(error);
      connection.reports.forget(x);
    } finally {
      staging.release();
    }
  }

  /** Records each member of gathered payload `x` as received into its destination, and awaits
   *  the sender's report of the payload for all of them. */
  #gatherReceived(members: readonly PendingTensor[], dests: readonly Tensor[], received: Map<PendingTensor, Tensor>, plan: TransferPlan, seen: ProtocolSeen | void, x: number, bytes: number): void {
    const infos = members.map((member, k) => {
      received.set(member, dests[k]!);
      const info = reportReceived(member.where, plan, seen, this.scope.connection.reports);
      info.bytes = bytes;
      info.gathered = members.length;
      this.transfers.push(info);
      return info;
    });
    this.#awaitReport(infos, plan, x);
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

/** Receives `wire`'s bytes into `dest`: through a host bounce when the plan says this side stages. */
function receiveAsPlanned(mover: Mover, wire: TensorWire, dest: Tensor, plan: TransferPlan, scope: TransferScope): Promise<ProtocolSeen | void> {
  if (plan.bounce !== undefined) return stagedReceive(mover, wire, dest, scope);
  // `dest` stays out of its pool until the receive has ended, whatever its caller does meanwhile:
  // a call that failed first (its deadline) left the receive posted, and a caller that released
  // a lent destination had it handed out again while a hostile owner could still write into it.
  const unhold = dest.hold();
  const receiving = mover.receive(wire, dest, scope);
  receiving.then(unhold, unhold);
  return receiving;
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
