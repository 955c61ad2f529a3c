// The tensors of one frame on the way out: a plan, a mover and a descriptor per tensor, the
// tensors that share a tag message gathered (gather.ts), and the sends that follow the frame, each
// reporting what UCX said of it (movers/report.ts) and telling the receiver (SENT).
import { Code, GdrpcError } from '../../errors.ts';
import { Tensor } from '../../tensor/index.ts';
import type { Placement } from '../../schema/descriptor.ts';
import { FrameKind, MAX_TENSORS_PER_FRAME, type TensorWire } from '../../wire/frames.ts';
import { ProducerSync, producerDone } from '../../compute/ready.ts';
import type { CudaEvent } from '../../compute/stream.ts';
import { moverByName } from '../movers/choose.ts';
import type { Mover, Outgoing, ProtocolSeen, TransferInfo, TransferScope } from '../movers/mover.ts';
import { planSend, type SendPolicy, type TransferPlan } from '../movers/plan.ts';
import { plannedInfo, reportSent } from '../movers/report.ts';
import { bounceFor, stagingReason } from '../movers/staging.ts';
import { memoryTypeOf } from '../runtime/memory-support.ts';
import { RemoteTensor, exposeRemote, type Exposed } from '../remote/remote.ts';
import { gatherable, gatherChunks, gatheredOutgoing } from './gather.ts';
import { tensorTooLarge } from './memory-errors.ts';
import { tooManyTensors, type TransferSite } from './transfer.ts';

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
  /** Waits for the producers of CUDA tensors (compute/ready.ts ProducerSync). */
  readonly #sync = new ProducerSync();
  /** Bounces to give back if the frame never leaves. */
  readonly #discards: Array<() => void> = [];
  /** Tensors encoded so far (at most MAX_TENSORS_PER_FRAME). */
  #tensors = 0;
  /** Bytes of the tensors encoded so far whose bytes go with the frame (not remote handles). */
  #bytes = 0;
  /** Tensors that may share a tag message (mover `g`), by device and byte length. */
  readonly #candidates = new Map<string, GatherCandidate[]>();

  constructor(private readonly scope: TransferScope, private readonly policy: SendPolicy, private readonly site: TransferSite) {}

  /** The tensors this frame exposed `@remote`. */
  readonly #exposed: Exposed[] = [];
  get exposed(): readonly Exposed[] { return this.#exposed; }

  /** The EncodeTensor callback of encodeFields. */
  readonly encode = (value: unknown, where: string, placement: Placement): unknown => {
    if (++this.#tensors > MAX_TENSORS_PER_FRAME) throw tooManyTensors(`${this.site.label}${where}`);
    if (value instanceof RemoteTensor) return value.wire;
    if (!(value instanceof Tensor)) throw new GdrpcError(Code.INVALID_ARGUMENT, `${where}: expected a Tensor`);
    if (placement.kind === 'remote') {
      this.#sync.before(value);
      const exposed = exposeRemote(value, this.scope);
      this.#exposed.push(exposed);
      // A frame that never leaves takes its exposures with it: nobody got the handle.
      this.#discards.push(exposed.end);
      return exposed.wire;
    }
    const { connection } = this.scope;
    this.#bytes += value.byteLength;
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

  /** Bytes of the tensors encoded whose bytes go with the frame (what the receiver counts). */
  get bytes(): number { return this.#bytes; }

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
      const { connection } = this.scope;
      reportSent(entry.infos, entry.plan, seen, this.policy.noStaging, connection.peer, connection.reports);
    })).then(() => undefined);
  }

  /** Tells the receiver of a completed tag send how UCX moved it (SENT): a receive cannot ask.
   *  Under noStaging the receiver waits for it, so it goes at once; otherwise it rides along
   *  with the next frame (Connection.reportSoon). */
  #report(entry: Sending, seen: ProtocolSeen | void): void {
    const { connection, call } = this.scope;
    if (entry.plan.mover !== 'tag' || connection.peerLimits.reports !== true || !connection.isOpen) return;
    const transfer = entry.outgoing.wire.x!;
    const description = seen?.protocol ?? '';
    if (this.policy.noStaging) {
      connection.send(FrameKind.Sent, call, { x: transfer, p: description }).catch(() => { /* the connection is gone: the receiver's wait ends with it */ });
    } else {
      connection.reportSoon(call, transfer, description);
    }
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
