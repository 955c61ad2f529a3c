// The interface every tensor mover implements, and what a transfer reports. A mover moves the
// bytes of one tensor between two processes once the frame that describes it has been sent.
import type { Tensor } from '../../tensor/index.ts';
import type { TensorWire } from '../../wire/frames.ts';
import type { Connection } from '../connection.ts';

export type MoverName = 'inline' | 'tag' | 'rma';
export type TransferPath = 'inline' | 'shm' | 'tcp' | 'cuda_ipc' | 'rdma' | 'staged';

/** One tensor's transfer as a call result reports it (callInfo). */
export interface TransferInfo { argument: string; bytes: number; mover: MoverName; path: TransferPath }

/** The sending half of a transfer: the descriptor to put in the frame, and the send itself. */
export interface Outgoing {
  wire: TensorWire;
  /** Moves the bytes (called after the frame went out); resolves when the sender may reuse the
   *  memory (tag: send complete; rma: FIN or release; inline: at once). */
  start(): Promise<void>;
}

/** Where a transfer happens: the connection and the call it belongs to. */
export interface TransferScope { connection: Connection; call: number }

export interface Mover {
  readonly name: MoverName;
  /** Builds the descriptor for `tensor` and the function that sends its bytes. */
  prepare(tensor: Tensor, scope: TransferScope): Outgoing;
  /** Fills `dest` (already allocated, same byte length) with the bytes `wire` describes. */
  receive(wire: TensorWire, dest: Tensor, scope: TransferScope): Promise<void>;
  /** Declines the bytes `wire` describes without allocating (limit, validation, cancellation),
   *  leaving nothing pending on either side. */
  refuse(wire: TensorWire, scope: TransferScope): Promise<void>;
}
