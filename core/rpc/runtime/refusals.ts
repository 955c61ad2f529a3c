// Tensors of refused frames that a runtime's connections are turning away (transfer/refuse.ts):
// each is a receive posted into one byte and held until its payload comes or its connection
// closes, about 3.5 KB of heap each while it waits. A connection may have MAX_TENSORS_PER_FRAME
// of them outstanding (one frame's worth), but a peer may open many connections: 60 connections
// each at that cap would hold about 3.4 GB for transferTimeoutMs (a helper session measured the
// cost per tensor, 2026-12-06). Past MAX_REFUSING_TENSORS across the runtime the connection turning
// away the most is closed: an honest peer has a few outstanding at most, for a call refused
// while its tensors were on their way.
import { MAX_TENSORS_PER_FRAME } from '../../wire/frames.ts';
import { GdrpcError, Code } from '../../errors.ts';

/** Tensors all of a runtime's connections may be turning away at once: four at their own cap. */
export const MAX_REFUSING_TENSORS = 4 * MAX_TENSORS_PER_FRAME;

/** A connection turning tensors away. */
export interface RefusingHolder {
  readonly peer: string;
  /** Tensors it is turning away now (its own count, at most MAX_TENSORS_PER_FRAME). */
  readonly refusing: number;
  readonly isOpen: boolean;
  close(error: GdrpcError): void;
}

export class RefusalCount {
  /** Holders turning some away now. */
  readonly #holders = new Set<RefusingHolder>();
  #total = 0;

  constructor(readonly limit = MAX_REFUSING_TENSORS) {}

  /** Tensors the runtime's connections are turning away now. */
  get total(): number { return this.#total; }

  /** `holder` is about to turn away `count` more. Past the limit, the open holder that would then
   *  turn away the most (perhaps `holder`) is closed; false when that was `holder`, which then
   *  turns nothing away (closing it dropped what it held). The other holder's refusals settle as
   *  its receives are cancelled, so the count may stay over the limit for that long. */
  begin(holder: RefusingHolder, count: number): boolean {
    if (this.#total + count > this.limit) {
      let most = holder;
      let mostCount = holder.refusing + count;
      for (const other of this.#holders) {
        if (other !== holder && other.isOpen && other.refusing > mostCount) {
          most = other;
          mostCount = other.refusing;
        }
      }
      most.close(new GdrpcError(Code.RESOURCE_EXHAUSTED, `${most.peer} has ${mostCount} tensors of refused frames to turn away, the most while this runtime's connections turn away ${this.#total + count} (at most ${this.limit} together; docs/security.md)`));
      if (most === holder) return false;
    }
    this.#total += count;
    this.#holders.add(holder);
    return true;
  }

  /** One of `holder`'s refusals settled; `left` it still has. */
  settled(holder: RefusingHolder, left: number): void {
    this.#total -= 1;
    if (left === 0) this.#holders.delete(holder);
  }
}
