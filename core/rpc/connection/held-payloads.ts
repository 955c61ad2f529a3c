// Tensor payloads of one connection that arrived before their receive was posted (the dispatcher
// took them out of UCX's unexpected queue). A payload whose frame was read is kept until its
// receive takes it; one that no frame announced yet is kept a while for a frame still on its way,
// a few at most, then dropped.
import type { TakenMessage } from '../../ucx/index.ts';
import type { HeldBytes, HeldBytesHolder } from '../runtime/held-bytes.ts';

/** Tensor payloads a connection holds for frames still on their way; more closes it. */
export const MAX_HELD_PAYLOADS = 64;
/** How long a held payload waits for the frame that announces it before it is dropped. */
const HOLD_MS = 10_000;

export class HeldPayloads {
  /** Payloads that arrived before their receive was posted, by transfer id; `weighed`: counted
   *  in the runtime's HeldBytes (held while no frame had announced it). */
  readonly #held = new Map<number, { message: TakenMessage; at: number; weighed: boolean }>();
  /** Transfers announced by frames already read whose receive is not posted yet (the
   *  destination may be waiting for pool memory), with the bytes their frames announced: their
   *  payloads are held without limit of number or time, but no larger than that. */
  readonly #expected = new Map<number, number>();
  #timer: NodeJS.Timeout | undefined;

  /** `drop` receives a payload into nothing (Dispatcher.drop); `bytes` weighs the unannounced ones
   *  across the runtime, on behalf of `holder` (the connection). */
  constructor(private readonly drop: (message: TakenMessage) => void, private readonly bytes?: { count: HeldBytes; holder: HeldBytesHolder }) {}

  /** A frame announced the payload of `transfer`, of `bytes` (the tensors of a gather share one
   *  payload: their bytes add up); its receive (or refusal) comes later. */
  expect(transfer: number, bytes: number): void {
    this.#expected.set(transfer, (this.#expected.get(transfer) ?? 0) + bytes);
  }

  /** The bytes frames announced for `transfer`'s payload while its receive is not posted yet;
   *  undefined when none did. */
  announced(transfer: number): number | undefined {
    return this.#expected.get(transfer);
  }

  /** Keeps the payload of `transfer`; false (the payload dropped) when it is one unannounced
   *  payload too many, or a second one for the same transfer: the peer is misbehaving. */
  hold(transfer: number, message: TakenMessage): boolean {
    if (this.#expected.has(transfer) && !this.#held.has(transfer)) {
      // Announced, its call bounds how long it waits (deadline, pool wait, refusal).
      this.#held.set(transfer, { message, at: Date.now(), weighed: false });
      return true;
    }
    if (this.#expire() >= MAX_HELD_PAYLOADS || this.#held.has(transfer)) {
      this.drop(message);
      return false;
    }
    this.#held.set(transfer, { message, at: Date.now(), weighed: this.bytes !== undefined });
    // Last: past the runtime's limit this may close the connection, which clears what it holds.
    this.#weigh(message.length);
    // Dropped after HOLD_MS even if nothing else arrives for this connection.
    this.#timer ??= setTimeout(() => this.#sweep(), HOLD_MS + 1).unref();
    return true;
  }

  /** The held payload of `transfer`, taken out (its receive is being posted); or undefined. */
  take(transfer: number): TakenMessage | undefined {
    this.#expected.delete(transfer);
    const held = this.#held.get(transfer);
    if (held === undefined) return undefined;
    this.#held.delete(transfer);
    if (held.weighed) this.#weigh(-held.message.length);
    return held.message;
  }

  /** Drops everything held (the connection closed). */
  clear(): void {
    let weighed = 0;
    for (const held of this.#held.values()) {
      if (held.weighed) weighed += held.message.length;
      this.drop(held.message);
    }
    this.#held.clear();
    if (weighed > 0) this.#weigh(-weighed);
    this.#expected.clear();
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #weigh(bytes: number): void {
    this.bytes?.count.add(this.bytes.holder, bytes);
  }

  #sweep(): void {
    this.#timer = undefined;
    if (this.#expire() > 0) this.#timer = setTimeout(() => this.#sweep(), HOLD_MS + 1).unref();
  }

  /** Drops held payloads no frame announced within HOLD_MS; returns how many unannounced remain. */
  #expire(): number {
    const now = Date.now();
    let unannounced = 0;
    for (const [id, held] of this.#held) {
      if (this.#expected.has(id)) continue;
      if (now - held.at > HOLD_MS) {
        this.#held.delete(id);
        if (held.weighed) this.#weigh(-held.message.length);
        this.drop(held.message);
      } else {
        unannounced += 1;
      }
    }
    return unannounced;
  }
}
