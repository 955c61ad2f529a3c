// The interface every tensor mover implements, and what a transfer reports. A mover moves the
// bytes of one tensor between two processes once the frame that describes it has been sent.
import type { Tensor } from '../../tensor/index.ts';
import type { TensorWire } from '../../wire/frames.ts';
import type { Connection } from '../connection/connection.ts';

export type MoverName = 'inline' | 'tag' | 'rma';
export type TransferPath = 'inline' | 'shm' | 'tcp' | 'cuda_ipc' | 'rdma' | 'staged';

/** One tensor's transfer as a call result reports it (callInfo). */
export interface TransferInfo {
  argument: string;
  bytes: number;
  mover: MoverName;
  /** The path class: from UCX's description of the send on the sending side, predicted from the
   *  lanes and the memory types on the receiving side (docs/gpu.md "Transfer paths"). */
  path: TransferPath;
  /** UCX's description of this side's request (ucp_request_query), for debugging: tag and RMA movers. */
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
