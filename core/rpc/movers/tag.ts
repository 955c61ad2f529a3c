// Tag rendezvous mover: the sender tag-sends the bytes right after the frame; the receiver, having
// allocated its destination, posts a receive with the exact payload tag. UCX picks the transport
// (shared memory, cuda_ipc, RDMA or TCP) and the protocol (eager or rendezvous) by size.
import { Code, GdrpcError } from '../../errors.ts';
import type { Tensor } from '../../tensor/index.ts';
import type { TensorWire } from '../../wire/frames.ts';
import { EXACT_MASK } from '../../wire/tag.ts';
import type { TagBuffer, TagRecvResult } from '../../ucx/index.ts';
import type { Mover, Outgoing, ProtocolSeen, TransferScope } from './mover.ts';
import { tagBuffer } from './memory.ts';
import { memoryTypeOf } from '../runtime/memory-support.ts';

export const tagMover: Mover = {
  name: 'tag',

  prepare(tensor: Tensor, { connection }: TransferScope): Outgoing {
    const x = connection.transfers.next();
    const wire: TensorWire = { dt: tensor.dtype, sh: [...tensor.shape], n: tensor.byteLength, mt: memoryTypeOf(tensor), m: 't', x };
    return { wire, start: () => sendPayload(connection, x, tensor) };
  },

  async receive(wire: TensorWire, dest: Tensor, { connection }: TransferScope): Promise<ProtocolSeen | void> {
    const { buffer, release } = tagBuffer(dest, connection.runtime.context, connection.runtime.stats);
    try {
      // Only the connection's end cancels this receive: cancelling it while the bytes are on the
      // way would leave them unmatched in UCX (docs/wire.md "Tag rendezvous").
      const result = await receivePayload(connection, wire.x!, buffer);
      if (result.length !== wire.n) {
        throw new GdrpcError(Code.INVALID_ARGUMENT, `tensor payload of ${result.length} bytes, descriptor said ${wire.n}`);
      }
      return { protocol: result.protocol ?? '' };
    } catch (error) {
      throw connection.closedError ?? cutOff(connection, error);
    } finally {
      release();
    }
  },

  async refuse(wire: TensorWire, { connection }: TransferScope): Promise<void> {
    // A closed connection has nothing left to match: its end dropped the payloads it held and
    // cancels its receives. (A receive posted now would only fail, an error made per tensor: a
    // frame of 16,384 tensors refused as its connection closed cost the event loop a second.)
    if (!connection.isOpen) return;
    // Dropped before its frame came (runtime/held-bytes.ts): nothing of it is left to match.
    if (connection.payloads.forgetDropped(wire.x!)) return;
    // Match the payload into one byte: UCX completes the sender and reports truncation here.
    await receivePayload(connection, wire.x!, new Uint8Array(1)).catch(() => { /* truncation is the expected outcome */ });
  },
};

/** A payload receive's failure while the connection is still open. One that ends CANCELLED though
 *  nothing here cancelled it was ended by UCX, which does so to a rendezvous whose sender's
 *  endpoint failed: the connection is about to learn it (its endpoint's error comes after), and the
 *  call fails UNAVAILABLE as it would then (in test/faults/process-faults.test.ts a client resumed
 *  after its server had dropped it saw CANCELLED in most runs whose drop came one liveness tick
 *  later, 3.37 s instead of 3.06 s, as most did once control messages were taken by the watch). */
function cutOff(connection: TransferScope['connection'], error: unknown): GdrpcError {
  const failure = GdrpcError.from(error);
  if (failure.code !== Code.CANCELLED || connection.signal.aborted) return failure;
  return new GdrpcError(Code.UNAVAILABLE, `the tensor bytes from ${connection.peer} stopped: UCX ended their receive (${failure.rawMessage}), as it does when the peer's endpoint fails`, { cause: failure });
}

/** Sends payload `x` (a frame announced it) from `tensor`; settles once UCX is done reading it (the
 *  caller may then reuse or free the tensor), with UCX's description of the send, which is the
 *  path the call reports. Watched: a peer that never takes the bytes must not hold the tensor for
 *  ever (Payloads.watchSend). */
export async function sendPayload(connection: TransferScope['connection'], x: number, tensor: Tensor): Promise<ProtocolSeen | void> {
  // The tensor's memory stays out of its pool until UCX is done reading it, even if its owner
  // releases it meanwhile (the call that exposed or sent it ended first).
  const unhold = tensor.hold();
  let tagged: ReturnType<typeof tagBuffer>;
  try {
    tagged = tagBuffer(tensor, connection.runtime.context, connection.runtime.stats);
  } catch (error) {
    unhold();
    throw error;
  }
  const { buffer, release } = tagged;
  const unwatch = connection.payloads.watchSend(x);
  try {
    return await connection.endpoint.tagSend(connection.outgoingDataTag(x), buffer, { untilComplete: true, describe: connection.runtime.describes });
  } catch (error) {
    throw connection.closedError ?? GdrpcError.from(error, Code.UNAVAILABLE);
  } finally {
    unwatch();
    release();
    unhold();
  }
}

/** Receives the payload of `transfer`: one the dispatcher already took out of UCX's queue (it came
 *  before its frame was read), else through a receive posted with its exact tag. */
function receivePayload(connection: TransferScope['connection'], transfer: number, buffer: TagBuffer): Promise<TagRecvResult> {
  return connection.payloads.receiving(() => receiveOrTake(connection, transfer, buffer));
}

async function receiveOrTake(connection: TransferScope['connection'], transfer: number, buffer: TagBuffer): Promise<TagRecvResult> {
  const worker = connection.runtime.worker;
  const held = connection.payloads.takeHeld(transfer);
  // Every receive settles only when UCX is done writing `buffer`, whatever the outcome: its
  // memory (a pool block) goes back only then.
  if (held !== undefined) return worker.tagRecvTaken(held, buffer, { untilComplete: true, describe: connection.runtime.describes });
  // Bytes a peer announced but does not send must not hold the destination (a pool block) for
  // ever: past the transfer timeout the connection closes (Payloads.watchTransfer), and its
  // end cancels this receive.
  const unwatch = connection.payloads.watchTransfer(transfer);
  try {
    return await worker.tagRecv(buffer, connection.incomingDataTag(transfer), EXACT_MASK, { signal: connection.signal, untilComplete: true, describe: connection.runtime.describes });
  } finally {
    unwatch();
  }
}
