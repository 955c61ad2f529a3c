// What a server call keeps of its argument objects' receives (the REQUEST's, and a client
// stream's items): those running, and once one settled its tensors alone, released when the call
// is over (the handler may have released them first), and their transfers. Made at the first
// argument object that carries tensor bytes: the small call makes none. Kept whole until the call
// ended, a client stream of 120,000 items of one tensor each, each released by its handler, held
// 322 MiB of a server's heap, 2.7 KB an item (a helper session's attack, 2026-12-06).
import type { Tensor } from '../../tensor/index.ts';
import type { TransferInfo } from '../movers/mover.ts';
import type { IncomingTensors } from '../transfer/transfer.ts';

/** Transfers a call keeps for CallContext.transfers across its stream items (the REQUEST's own
 *  are kept whole, up to the 16,384 tensors a frame may carry). */
export const MAX_KEPT_TRANSFERS = 4096;

export class CallArguments {
  /** Argument objects whose receive is running (an abort does not stop bytes already on their
   *  way), and the receives themselves. */
  readonly #incoming = new Set<IncomingTensors>();
  readonly #receiving = new Set<Promise<unknown>>();
  #held: Tensor[] = [];
  #compactHeldAt = 1024;
  readonly #transfers: TransferInfo[] = [];

  /** `incoming`'s receive runs: `receiving` settles when its bytes are in place or failed. */
  receiving(incoming: IncomingTensors, receiving: Promise<unknown>): void {
    this.#incoming.add(incoming);
    this.#receiving.add(receiving);
  }

  /** That receive settled: its tensors wait for the call's end, its transfers are kept (a stream
   *  item's within MAX_KEPT_TRANSFERS), the rest of it goes. */
  received(incoming: IncomingTensors, receiving: Promise<unknown>, streamItem: boolean): void {
    this.#incoming.delete(incoming);
    this.#receiving.delete(receiving);
    for (const transfer of incoming.transfers) if (!streamItem || this.#transfers.length < MAX_KEPT_TRANSFERS) this.#transfers.push(transfer);
    for (const tensor of incoming.takeAllocated()) this.#held.push(tensor);
    if (this.#held.length >= this.#compactHeldAt) {
      // Those the handler released already need nothing more.
      this.#held = this.#held.filter((tensor) => !tensor.released);
      this.#compactHeldAt = Math.max(1024, 2 * this.#held.length);
    }
  }

  /** The transfers so far: of the receives that settled, then of those running (a copy). */
  get transfers(): TransferInfo[] {
    return [...this.#transfers, ...[...this.#incoming].flatMap((frame) => frame.transfers)];
  }

  /** The receives still running. */
  get running(): Iterable<Promise<unknown>> { return this.#receiving; }

  /** Releases the tensors received (the call is over and every receive settled). */
  release(): void {
    for (const tensor of this.#held.splice(0)) if (!tensor.released) tensor.release();
  }
}
