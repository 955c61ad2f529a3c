// Gathered tag transfers (mover `g`, docs/wire.md): the tensors of one frame that would each be a
// tag message of their own, of one byte length and in one memory, share one message instead. The
// sender copies them into a staging tensor side by side (one block-copy kernel on a GPU, one
// memcpy each on the host) and sends it; the receiver takes the message into a staging tensor of
// its own and copies each tensor out to its destination. Thousands of KV-cache blocks then cost one
// rendezvous, one receive and one report instead of thousands.
import { Code, GdrpcError } from '../../errors.ts';
import { Tensor, type Device } from '../../tensor/index.ts';
import type { TensorWire } from '../../wire/frames.ts';
import type { Outgoing, ProtocolSeen, TransferScope } from '../movers/mover.ts';
import { sendPayload } from '../movers/tag.ts';
import type { TransferPlan } from '../movers/plan.ts';
import type { Runtime } from '../runtime/runtime.ts';
import { DEFAULT_PROCESS_POOL_BYTES } from '../runtime/process-pool.ts';

/** Largest GPU tensor gathered with others: bigger ones gain nothing from sharing a message. */
export const GATHER_MAX_CUDA_BYTES = 1 << 20;
/** Largest host tensor gathered: copying host bytes costs what a message saves beyond this. */
export const GATHER_MAX_HOST_BYTES = 64 << 10;
/** Most tensors in one gathered message. */
export const GATHER_MAX_COUNT = 1024;
/** Largest gathered message (its staging tensor on each side). */
export const GATHER_MAX_MESSAGE = 64 << 20;

/** Whether a tensor the sender planned this way may share a message with others. */
export function gatherable(plan: TransferPlan, device: Device, peerGathers: boolean): boolean {
  if (!peerGathers || plan.mover !== 'tag' || plan.bounce !== undefined || plan.bytes === 0) return false;
  return plan.bytes <= (device === 'cpu' ? GATHER_MAX_HOST_BYTES : GATHER_MAX_CUDA_BYTES);
}

/** Splits tensors of one device and byte length into the messages they go in: as many per message
 *  as GATHER_MAX_COUNT, GATHER_MAX_MESSAGE and the receiver's largest tensor allow. */
export function gatherChunks<T>(items: readonly T[], bytes: number, peerMaxTensor: number): T[][] {
  const perMessage = Math.max(1, Math.min(GATHER_MAX_COUNT, Math.floor(Math.min(GATHER_MAX_MESSAGE, peerMaxTensor) / bytes)));
  const chunks: T[][] = [];
  for (let start = 0; start < items.length; start += perMessage) chunks.push(items.slice(start, start + perMessage));
  return chunks;
}

/** A staging tensor of `bytes` on `device`: from the runtime's pool there, or a one-off allocation
 *  when the pool has no room (a gather never fails for want of pool memory). */
export function stagingTensor(runtime: Runtime, device: Device, bytes: number): Tensor {
  try {
    return runtime.pool(device, { bytes: DEFAULT_PROCESS_POOL_BYTES, allowOverflow: true }).allocate([bytes], 'u8');
  } catch {
    return Tensor.empty([bytes], 'u8', { device });
  }
}

/** The send of `tensors` (each `bytes` long, on one device) as transfer `x`: copied side by side
 *  into a staging tensor when the send starts (after the frame), then one tag send of it. The
 *  copy waits for the tensors' producers (BlockCopier). */
export function gatheredOutgoing(tensors: readonly Tensor[], bytes: number, x: number, scope: TransferScope): Outgoing {
  const first = tensors[0]!;
  const wire: TensorWire = { dt: 'u8', sh: [tensors.length * bytes], n: tensors.length * bytes, mt: first.device === 'cpu' ? 'host' : 'cuda', m: 't', x };
  return {
    wire,
    async start(): Promise<ProtocolSeen | void> {
      const { connection } = scope;
      const { runtime } = connection;
      let staging: Tensor;
      try {
        staging = stagingTensor(runtime, first.device, tensors.length * bytes);
      } catch (error) {
        await announcedButFailed(scope, x);
        throw error;
      }
      try {
        try {
          await runtime.blocks.copy(bytes, tensors.map((src, k) => ({ dst: staging, dstOffset: k * bytes, src, srcOffset: 0 })));
        } catch (error) {
          await announcedButFailed(scope, x);
          throw error;
        }
        return await sendPayload(connection, x, staging);
      } finally {
        staging.release();
      }
    },
  };
}

/** The frame announced payload `x` but it cannot be made (staging memory, the copy): a 1-byte
 *  message under its tag fails the receiver's length check, so that only this call fails instead
 *  of the receiver waiting out its transfer timeout and closing the connection. */
async function announcedButFailed(scope: TransferScope, x: number): Promise<void> {
  const { connection } = scope;
  if (!connection.isOpen) return;
  await connection.endpoint.tagSend(connection.outgoingDataTag(x), new Uint8Array(1)).catch(() => { /* the connection is failing anyway */ });
}

/** A gathered message as the receiver sees it: its members in the order of their offsets. */
export interface Gather<P> { x: number; bytes: number; members: P[] }

/** Groups the gathered descriptors of a frame by message and checks them before anything is
 *  allocated: one byte length per message, offsets exactly 0, n, ..., (count - 1) * n, at most
 *  GATHER_MAX_COUNT tensors, the message within `maxTensor` and GATHER_MAX_MESSAGE, and no tag
 *  transfer of the frame reusing a message's id. */
export function checkGathers<P extends { wire: TensorWire; where: string }>(pending: readonly P[], maxTensor: number, label: string): Gather<P>[] {
  // Every received frame is checked: one without gathered tensors (a small call) allocates nothing.
  if (!pending.some((p) => p.wire.m === 'g')) return [];
  const byX = new Map<number, P[]>();
  const singles = new Set<number>();
  for (const p of pending) {
    if (p.wire.m === 't') singles.add(p.wire.x!);
    if (p.wire.m !== 'g') continue;
    const members = byX.get(p.wire.x!);
    if (members === undefined) byX.set(p.wire.x!, [p]);
    else if (members.length < GATHER_MAX_COUNT) members.push(p);
    else throw new GdrpcError(Code.INVALID_ARGUMENT, `${label}${p.where}: gathered transfer ${p.wire.x} has more than ${GATHER_MAX_COUNT} tensors`);
  }
  const gathers: Gather<P>[] = [];
  for (const [x, members] of byX) {
    const bytes = members[0]!.wire.n;
    const bad = (why: string): GdrpcError => new GdrpcError(Code.INVALID_ARGUMENT, `${label}${members[0]!.where}: gathered transfer ${x} ${why}`);
    if (singles.has(x)) throw bad('shares its id with a tag transfer of the same frame');
    if (bytes === 0) throw bad('has tensors of 0 bytes');
    if (members.some((p) => p.wire.n !== bytes)) throw bad('mixes tensors of different byte lengths');
    const ordered = [...members].sort((a, b) => a.wire.f! - b.wire.f!);
    if (ordered.some((p, k) => p.wire.f !== k * bytes)) throw bad(`has offsets other than 0, ${bytes}, ..., ${(members.length - 1) * bytes}`);
    const limit = Math.min(maxTensor, GATHER_MAX_MESSAGE);
    if (members.length * bytes > limit) {
      throw new GdrpcError(Code.RESOURCE_EXHAUSTED, `${label}${members[0]!.where}: gathered transfer ${x} of ${members.length * bytes} bytes exceeds the limit of ${limit}`);
    }
    gathers.push({ x, bytes, members: ordered });
  }
  return gathers;
}
