// Tensor payloads of one connection that arrived before their receive was posted (the dispatcher
// took them out of UCX's unexpected queue). A payload whose frame was read is kept until its
// receive takes it; one that no frame announced yet is kept a while for a frame still on its way,
// a few at most, then dropped.
import type { TakenMessage } from '../../ucx/index.ts';
import type { HeldBytes, HeldBytesHolder } from '../runtime/held-bytes.ts';

/** Tensor payloads a connection holds for frames still on their way; more closes it. */
export const MAX_HELD_PAYLOADS = 64;
/** The same while control messages of the connection's own wait to be read (the frames of its
 *  payloads may well be among them): an honest client keeping 256 calls of a 64 KiB tensor in
 *  flight was closed at 64, in 2 of 14 runs on the CPU box, when the server's reading fell more
 *  than 200 ms behind. Its calls bound an honest peer's payloads ahead of their frames. */
export const MAX_HELD_PAYLOADS_BEHIND = 1024;
/** What a held payload weighs across the runtime at least (HeldBytes): what holding one costs
 *  besides its bytes (its UCX descriptor, its entries here), so that small ones add up too. */
export const HELD_PAYLOAD_MIN_WEIGHT = 4096;
/** How long a held payload waits for the frame that announces it before it is dropped. */
const HOLD_MS = 10_000;

export class HeldPayloads {
  /** Payloads that arrived before their receive was posted, by transfer id; `weight`: what it
   *  counts in the runtime's HeldBytes (0 unless held while no frame had announced it). */
  readonly #held = new Map<number, { message: TakenMessage; at: number; weight: number }>();
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
   *  payload too many (MAX_HELD_PAYLOADS, MAX_HELD_PAYLOADS_BEHIND while `framesWaiting`: control
   *  messages of the connection's own wait to be read), or a second one for the same transfer:
   *  the peer is misbehaving. */
  hold(transfer: number, message: TakenMessage, framesWaiting = false): boolean {
    if (this.#expected.has(transfer) && !this.#held.has(transfer)) {
      // Announced, its call bounds how long it waits (deadline, pool wait, refusal).
      this.#held.set(transfer, { message, at: Date.now(), weight: 0 });
      return true;
    }
    if (this.#expire() >= (framesWaiting ? MAX_HELD_PAYLOADS_BEHIND : MAX_HELD_PAYLOADS) || this.#held.has(transfer)) {
      this.drop(message);
      return false;
    }
    const weight = this.bytes === undefined ? 0 : Math.max(message.length, HELD_PAYLOAD_MIN_WEIGHT);
    this.#held.set(transfer, { message, at: Date.now(), weight });
    // Last: past the runtime's limit this may close the connection, which clears what it holds.
    this.#weigh(weight);
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
    if (held.weight > 0) this.#weigh(-held.weight);
    return held.message;
  }

  /** Drops everything held (the connection closed). */
  clear(): void {
    let weighed = 0;
    for (const held of this.#held.values()) {
      weighed += held.weight;
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
        if (held.weight > 0) this.#weigh(-held.weight);
        this.drop(held.message);
      } else {
        unannounced += 1;
      }
    }
    return unannounced;
  }
}
