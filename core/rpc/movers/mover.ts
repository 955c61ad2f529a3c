// The interface every tensor mover implements, and what a transfer reports. A mover moves the
// bytes of one tensor between two processes once the frame that describes it has been sent.
import type { Tensor } from '../../tensor/index.ts';
import type { TensorWire } from '../../wire/frames.ts';
import type { Connection } from '../connection/connection.ts';

export type MoverName = 'inline' | 'tag' | 'rma';
export type TransferPath = 'inline' | 'shm' | 'tcp' | 'cuda_ipc' | 'rdma' | 'staged';
/** Where a transfer's reported path comes from (docs/gpu.md "Transfer paths"). */
export type PathSource = 'ucx' | 'sender' | 'gdrpc' | 'predicted';

/** One tensor's transfer as a call result reports it (callInfo). */
export interface TransferInfo {
  argument: string;
  bytes: number;
  mover: MoverName;
  /** The path class (docs/gpu.md "Transfer paths"); `source` says how it is known. */
  path: TransferPath;
  /** 'ucx': UCX's description of this side's request (a tag sender, an RMA reader). 'sender': the
   *  sender's UCX description of its completed send, which it reported in a SENT frame (a tag
   *  receiver; see confirmedCallInfo). 'gdrpc': gdrpc moved the bytes itself (inline in the frame,
   *  or staged through its own host bounce). 'predicted': from the endpoint's lanes and the memory
   *  types, because UCX said nothing (reports off, or the sender's report has not come). */
  source: PathSource;
  /** Tensors that shared one tag message with this one (mover `g`, gathered by the sender), this
   *  one included; absent for a tensor that moved on its own. */
  gathered?: number;
  /** UCX's description of the request that moved the bytes (ucp_request_query), for debugging:
   *  this side's, or the sender's when `source` is 'sender'. Tag and RMA movers only. */
  protocol?: string;
}

/** What UCX said about this side's request of a transfer (tag and RMA movers). */
export interface ProtocolSeen { protocol: string }

/** The sending half of a transfer: the descriptor to put in the frame, and the send itself. */
export interface Outgoing {
  wire: TensorWire;
  /** Moves the bytes (called after the frame went out); resolves when the sender may reuse the
   *  memory (tag: send complete; rma: FIN or release; inline: at once), with UCX's report of
   *  the send where this side made one (tag). */
  start(): Promise<ProtocolSeen | void>;
}

/** Where a transfer happens: the connection and the call it belongs to. */
export interface TransferScope { connection: Connection; call: number }

export interface Mover {
  readonly name: MoverName;
  /** Builds the descriptor for `tensor` and the function that sends its bytes. */
  prepare(tensor: Tensor, scope: TransferScope): Outgoing;
  /** Fills `dest` (already allocated, same byte length) with the bytes `wire` describes; resolves
   *  with UCX's report of this side's request where it made one (tag receive, RMA get). */
  receive(wire: TensorWire, dest: Tensor, scope: TransferScope): Promise<ProtocolSeen | void>;
  /** Declines the bytes `wire` describes without allocating (limit, validation, cancellation),
   *  leaving nothing pending on either side. */
  refuse(wire: TensorWire, scope: TransferScope): Promise<void>;
}
