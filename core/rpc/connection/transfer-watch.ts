// A connection's tensor payloads in flight, each way, with when each is overdue: bytes the peer
// announced that must arrive, and bytes this side sends that the peer must take, both within the
// transfer timeout. One timer watches them all (a timer and an AbortController per receive cost as
// much as the receive's own work when a frame announces hundreds of tensors); past the timeout the
// connection closes, which ends the transfer with it (a rendezvous UCX had already matched cannot
// be cancelled by itself, and a send holds the memory it reads until the peer takes the bytes).
import { Code, GdrpcError } from '../../errors.ts';

/** What the watch needs of its connection. */
export interface WatchedConnection {
  readonly peer: string;
  readonly transferTimeoutMs: number;
  /** The connection has closed already: nothing is judged overdue any more. */
  readonly closedError: GdrpcError | undefined;
  close(error: GdrpcError): void;
}

export class TransferWatch {
  /** Receives and sends by transfer id, with when each is overdue: whole milliseconds since the
   *  watch began, small integers to V8 for the first 12 days (a double there is a heap object
   *  held by a long-lived Map: core/live-list.ts says why that matters). */
  readonly #receives = new Map<number, number>();
  readonly #sends = new Map<number, number>();
  readonly #epoch = performance.now();
  #timer: NodeJS.Timeout | undefined;

  constructor(private readonly connection: WatchedConnection) {}

  /** Whether a receive of `transfer` is watched now. */
  receiving(transfer: number): boolean { return this.#receives.has(transfer); }

  /** Watches the receive of `transfer`; returns what ends the watch. */
  receive(transfer: number): () => void {
    return this.#watch(this.#receives, transfer);
  }

  /** Watches the send of this side's payload `transfer`; returns what ends the watch. */
  send(transfer: number): () => void {
    return this.#watch(this.#sends, transfer);
  }

  /** The connection closed: nothing is watched any more. */
  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#receives.clear();
    this.#sends.clear();
  }

  #watch(watched: Map<number, number>, transfer: number): () => void {
    watched.set(transfer, Math.ceil(performance.now() - this.#epoch + this.connection.transferTimeoutMs));
    // Not cleared when the last watch ends (a timer set and cleared for every received tensor
    // cost about 0.4 µs a call on the CPU box): it runs out, and waits again only for what is
    // still watched then. Unreferenced: a pending transfer keeps the process alive by itself.
    this.#timer ??= setTimeout(this.#check, this.connection.transferTimeoutMs).unref();
    return () => { watched.delete(transfer); };
  }

  readonly #check = (): void => {
    this.#timer = undefined;
    const connection = this.connection;
    if (connection.closedError !== undefined) return;
    const now = performance.now() - this.#epoch;
    const receives = scan(this.#receives, now);
    if (receives.late !== undefined) {
      return connection.close(new GdrpcError(Code.DEADLINE_EXCEEDED, `${connection.peer} announced tensor bytes (transfer ${receives.late}) that did not arrive within ${connection.transferTimeoutMs} ms`));
    }
    const sends = scan(this.#sends, now);
    if (sends.late !== undefined) {
      return connection.close(new GdrpcError(Code.DEADLINE_EXCEEDED, `${connection.peer} did not take the tensor bytes of transfer ${sends.late} within ${connection.transferTimeoutMs} ms`));
    }
    const next = Math.min(receives.next, sends.next);
    if (next !== Infinity) this.#timer = setTimeout(this.#check, Math.max(1, next - now)).unref();
  };
}

/** The first transfer of `watched` overdue at `now`, else when the earliest falls due. */
function scan(watched: Map<number, number>, now: number): { late?: number; next: number } {
  let next = Infinity;
  for (const [transfer, due] of watched) {
    if (due <= now) return { late: transfer, next };
    next = Math.min(next, due);
  }
  return { next };
}
