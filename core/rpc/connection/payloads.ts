// A connection's tensor payloads: those that arrived before their receive was posted (held for
// their frame), the receives and sends in flight with their deadline (transfer-watch.ts), and
// whether the peer's bytes are visibly arriving, which liveness asks.
import type { TakenMessage, Worker } from '../../ucx/index.ts';
import { Code, GdrpcError } from '../../errors.ts';
import { transferOf, type ConnectionKey } from '../../wire/tag.ts';
import type { Dispatcher } from '../runtime/dispatcher.ts';
import { HeldPayloads, MAX_HELD_PAYLOADS, MAX_HELD_PAYLOADS_BEHIND, type DropReason } from './held-payloads.ts';
import type { HeldBytes } from '../runtime/held-bytes.ts';
import { TransferWatch, type WatchedConnection } from './transfer-watch.ts';

/** Wake-ups with work per second above which the worker counts as moving data (a peer sending
 *  bulk over TCP makes hundreds; UCX's keepalive of a stopped peer, one). */
const STREAMING_WAKES_PER_S = 10;

/** What the payloads need of their connection. */
export interface PayloadConnection extends WatchedConnection {
  readonly key: ConnectionKey;
  readonly admitted: boolean;
  readonly runtime: { readonly worker: Worker; readonly dispatcher: Dispatcher; readonly heldBytes: HeldBytes };
}

export class Payloads {
  /** Payloads that arrived before their receive was posted. */
  readonly #held: HeldPayloads;
  /** Payloads in flight each way, closed past transferTimeoutMs. */
  readonly #watch: TransferWatch;
  #incoming = 0;
  #sample = { at: performance.now(), activity: 0 };

  constructor(private readonly connection: PayloadConnection) {
    this.#held = new HeldPayloads((message) => connection.runtime.dispatcher.drop(message), connection.runtime.heldBytes);
    this.#watch = new TransferWatch(connection);
  }

  /** A frame announced the payload of `transfer`, of `bytes`; its receive (or refusal) comes later. */
  expect(transfer: number, bytes: number): void {
    if (this.connection.closedError !== undefined) return;
    this.#held.expect(transfer, bytes);
  }

  /** Why the payload of `transfer` came before its frame and was dropped (for the runtime's
   *  maxHeldPayloadBytes, or after waiting HOLD_MS for it); undefined when it was not. Its call is
   *  to fail: the bytes are gone. */
  dropped(transfer: number): DropReason | undefined {
    return this.#held.dropped(transfer);
  }

  /** Forgets a dropped payload (its frame was turned away): true when `transfer`'s was one, and
   *  there is nothing of it to match. */
  forgetDropped(transfer: number): boolean {
    return this.#held.forgetDropped(transfer);
  }

  /** Once a frame's descriptors were all read: a payload of `transfer` held since before it that
   *  is longer than the frame announced closes the connection INVALID_ARGUMENT (thrown too).
   *  Announced, it would count for nothing while its receive waits for pool memory, kept whole,
   *  and its receive would only fail on truncation: a peer's eager payloads announced as 1 KiB
   *  tensors held 2.7 GiB against the 1 GiB maxHeldPayloadBytes (a helper session's attack). */
  checkAnnounced(transfer: number): void {
    const length = this.#held.heldLength(transfer);
    const announced = this.#held.announced(transfer);
    if (length === undefined || announced === undefined || length <= announced) return;
    const error = this.#longerThanAnnounced(transfer, length, announced);
    this.connection.close(error);
    throw error;
  }

  /** A payload of `length` bytes for `transfer`, whose frames announced `announced`: the peer is
   *  broken or hostile (held, the payload would be kept whole, however large). */
  #longerThanAnnounced(transfer: number, length: number, announced: number): GdrpcError {
    return new GdrpcError(Code.INVALID_ARGUMENT, `${this.connection.peer} sent ${length} bytes for transfer ${transfer}, which its frame announced as ${announced}`);
  }

  /** A held payload of `transfer` (it arrived before its frame was read), taken out; or undefined. */
  takeHeld(transfer: number): TakenMessage | undefined {
    return this.#held.take(transfer);
  }

  /** A payload nobody had posted a receive for (the dispatcher took it out of UCX's queue). */
  stray(message: TakenMessage, low: number, framesWaiting = false): void {
    const { connection } = this;
    const dispatcher = connection.runtime.dispatcher;
    if (connection.closedError !== undefined) return dispatcher.drop(message);
    if (!connection.admitted) {
      dispatcher.drop(message);
      connection.close(new GdrpcError(Code.UNAUTHENTICATED, `${connection.peer} sent tensor bytes before admission`));
      return;
    }
    const transfer = transferOf(connection.key, low);
    const announced = this.#held.announced(transfer);
    if (announced !== undefined && message.length > announced) {
      // Held until its receive is posted, which may wait for pool memory: a payload larger than
      // its frame said would be held whole, however large (a peer's own UCX may send anything
      // eager), and its receive would only fail with truncation.
      dispatcher.drop(message);
      connection.close(this.#longerThanAnnounced(transfer, message.length, announced));
      return;
    }
    if (!this.#held.hold(transfer, message, framesWaiting)) {
      connection.close(new GdrpcError(Code.RESOURCE_EXHAUSTED, `${connection.peer} sent more than ${framesWaiting ? MAX_HELD_PAYLOADS_BEHIND : MAX_HELD_PAYLOADS} tensor payloads that no frame announced`));
    }
  }

  /** Runs the receive of a tensor payload from the peer, counted as an incoming transfer (for
   *  liveness: a peer whose bytes are arriving is not silent). */
  async receiving<T>(receive: () => Promise<T>): Promise<T> {
    this.#incoming += 1;
    try {
      return await receive();
    } finally {
      this.#incoming -= 1;
    }
  }

  /** Watches the receive of `transfer`: when its bytes have not arrived within transferTimeoutMs
   *  the connection closes, which cancels the receive with it. Returns what ends the watch. */
  watchTransfer(transfer: number): () => void {
    if (this.#watch.receiving(transfer)) {
      // Transfer ids are unique among the sender's live transfers (docs/wire.md): one payload
      // can match only one of two receives of an id, and the other would wait, unwatched once
      // the first's watch ended, holding its pool block for as long as the connection lives.
      this.connection.close(new GdrpcError(Code.INVALID_ARGUMENT, `${this.connection.peer} announced transfer ${transfer} again while its bytes were still awaited`));
      return () => {};
    }
    return this.#watch.receive(transfer);
  }

  /** Watches the send of this side's payload `transfer`: when the peer has not taken its bytes
   *  within transferTimeoutMs the connection closes, which ends the send. A rendezvous send holds
   *  the memory it reads (a result, a pull's tensor, an owner's gather staging) until the peer
   *  takes the bytes: a peer that never did held it for as long as it stayed connected (an
   *  owner's 2 GiB of gather staging by four such connections, scratch). Returns what ends the watch. */
  watchSend(transfer: number): () => void {
    return this.#watch.send(transfer);
  }

  /** Whether the peer's bytes are arriving now: a receive of its payloads is posted and the worker
   *  has been moving data since the last look. Asked on every liveness tick, so that the rate
   *  speaks of the last period only. */
  streaming(): boolean {
    return this.#dataMoving() && this.#incoming > 0;
  }

  /** The connection closed: held payloads are dropped and the watch stops. */
  close(): void {
    this.#held.clear();
    this.#watch.stop();
  }

  /** Whether the worker has been moving data since the last look (UCX cannot say for which
   *  endpoint): a rate of wake-ups with work, well above what keepalives alone cause. */
  #dataMoving(): boolean {
    const worker = this.connection.runtime.worker;
    if (worker.closed) return false;
    const now = performance.now();
    const activity = worker.activity();
    const rate = ((activity - this.#sample.activity) * 1000) / Math.max(1, now - this.#sample.at);
    this.#sample = { at: now, activity };
    return rate >= STREAMING_WAKES_PER_S;
  }
}
