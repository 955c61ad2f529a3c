// Tensor payloads of one connection that arrived before their receive was posted (the dispatcher
// took them out of UCX's unexpected queue). A payload whose frame was read is kept until its
// receive takes it; one that no frame announced yet is kept a while for a frame still on its way,
// a few at most, then dropped. One dropped because the runtime's connections held too many bytes
// of them (runtime/held-bytes.ts) is remembered as long as it would have been held: its frame,
// when it comes, fails its call instead of waiting for bytes that are gone.
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
export const HOLD_MS = 10_000;
/** How long a dropped payload is remembered for its frame (which then fails its call at once
 *  instead of waiting transferTimeoutMs for bytes that are gone, and closing the connection):
 *  a server behind on its control messages by more than HOLD_MS drops the payloads of frames it
 *  has not read yet. */
const DROPPED_MEMORY_MS = 60_000;

/** Why a payload was dropped before its frame came. */
export type DropReason = 'weight' | 'expired';

export class HeldPayloads implements HeldBytesHolder {
  /** Payloads that arrived before their receive was posted, by transfer id; `weight`: what it
   *  counts in the runtime's HeldBytes (0 unless held while no frame had announced it). */
  readonly #held = new Map<number, { message: TakenMessage; at: number; weight: number }>();
  /** Transfers announced by frames already read whose receive is not posted yet (the
   *  destination may be waiting for pool memory), with the bytes their frames announced: their
   *  payloads are held without limit of number or time, but no larger than that. */
  readonly #expected = new Map<number, number>();
  /** Unannounced payloads dropped to bring the runtime under maxHeldPayloadBytes, by transfer id,
   *  with when they arrived: they count as held (MAX_HELD_PAYLOADS) and expire as held ones do. */
  readonly #dropped = new Map<number, { at: number; why: DropReason }>();
  #timer: NodeJS.Timeout | undefined;

  /** `drop` receives a payload into nothing (Dispatcher.drop); `count` weighs the unannounced ones
   *  across the runtime. */
  constructor(private readonly drop: (message: TakenMessage) => void, private readonly count?: HeldBytes) {}

  /** A frame announced the payload of `transfer`, of `bytes` (the tensors of a gather share one
   *  payload: their bytes add up); its receive (or refusal) comes later. */
  expect(transfer: number, bytes: number): void {
    const announced = (this.#expected.get(transfer) ?? 0) + bytes;
    this.#expected.set(transfer, announced);
    // Held before it was announced: its call bounds it from now on, once the frames announced
    // all its bytes (a gather's tensors add up; one larger than announced keeps its weight, and
    // its receive fails on truncation). Announced, it is never dropped for weight (relieve).
    const held = this.#held.get(transfer);
    if (held !== undefined && held.weight > 0 && held.message.length <= announced) {
      const { weight } = held;
      held.weight = 0;
      this.#weigh(-weight);
    }
  }

  /** The length of the payload of `transfer` held now; undefined when none is. */
  heldLength(transfer: number): number | undefined {
    return this.#held.get(transfer)?.message.length;
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
    if (this.#expire() >= (framesWaiting ? MAX_HELD_PAYLOADS_BEHIND : MAX_HELD_PAYLOADS) || this.#held.has(transfer) || this.#dropped.has(transfer)) {
      this.drop(message);
      return false;
    }
    const weight = this.count === undefined ? 0 : Math.max(message.length, HELD_PAYLOAD_MIN_WEIGHT);
    this.#held.set(transfer, { message, at: Date.now(), weight });
    // Last: past the runtime's limit this may drop payloads of this connection's, this one among them.
    this.#weigh(weight);
    // Dropped after HOLD_MS even if nothing else arrives for this connection.
    this.#timer ??= setTimeout(() => this.#sweep(), HOLD_MS + 1).unref();
    return true;
  }

  /** Why the payload of `transfer` came unannounced and was dropped (for the runtime's
   *  maxHeldPayloadBytes, or after HOLD_MS); undefined when it was not: a frame announcing it
   *  cannot have its bytes. */
  dropped(transfer: number): DropReason | undefined {
    return this.#dropped.get(transfer)?.why;
  }

  /** Forgets that the payload of `transfer` was dropped (its frame was turned away): true when it
   *  was, and there is then nothing of it left to match. */
  forgetDropped(transfer: number): boolean {
    return this.#dropped.delete(transfer);
  }

  /** Drops the newest unannounced payloads until `bytes` of their weight are let go of, or none is
   *  left; returns the weight let go of. Called by the runtime's HeldBytes, which counts it (not
   *  told back through #weigh). */
  relieve(bytes: number): number {
    const newestFirst = [...this.#held].reverse();
    let freed = 0;
    for (const [transfer, held] of newestFirst) {
      if (freed >= bytes) break;
      // Announced ones are their calls' (their receives take them), and weigh nothing unless
      // larger than announced.
      if (held.weight === 0 || this.#expected.has(transfer)) continue;
      this.#held.delete(transfer);
      this.#dropped.set(transfer, { at: held.at, why: 'weight' });
      freed += held.weight;
      this.drop(held.message);
    }
    return freed;
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
    this.#dropped.clear();
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #weigh(bytes: number): void {
    this.count?.add(this, bytes);
  }

  #sweep(): void {
    this.#timer = undefined;
    if (this.#expire() > 0) this.#timer = setTimeout(() => this.#sweep(), HOLD_MS + 1).unref();
  }

  /** Drops held payloads no frame announced within HOLD_MS, and forgets dropped ones as old;
   *  returns how many unannounced remain, held or dropped. */
  #expire(): number {
    const now = Date.now();
    for (const [id, { at }] of this.#dropped) if (now - at > DROPPED_MEMORY_MS) this.#dropped.delete(id);
    let unannounced = this.#dropped.size;
    for (const [id, held] of this.#held) {
      if (this.#expected.has(id)) continue;
      if (now - held.at > HOLD_MS) {
        this.#held.delete(id);
        this.#dropped.set(id, { at: held.at, why: 'expired' });
        unannounced += 1;
        if (held.weight > 0) this.#weigh(-held.weight);
        this.drop(held.message);
      } else {
        unannounced += 1;
      }
    }
    return unannounced;
  }
}
