// What all of a runtime's connections hold for peers that are not taking it (docs/wire.md
// "Message window"): messages waiting for a peer's window, and messages handed to UCX whose send
// has not completed because the peer's socket is not taking them. Each connection's waiting
// messages are capped (backlog-watch.ts MAX_BLOCKED_BYTES, 32 MiB counted, once the oldest has
// waited its liveness time), and what is in UCX's hands by the peer's window, but a peer may open
// many connections: 60 of them from one address, each keeping to the server's window while never
// crediting it, held 715 MiB of a server's heap before each reached its own cap (scratch attack,
// CPU box), and a server takes 1,024 connections. Past the runtime's limit the connection whose
// peer has gone longest without taking anything (outbox.ts PROGRESS_BYTES) is closed, then the
// next, until what is left fits. Closing the one that held the most instead could be steered: 60
// connections each holding a little less than an honest client whose event loop was busy for a
// moment got that client closed, and never themselves (a helper session's attack, 2026-12-06).

/** RuntimeOptions.maxWaitingBytes by default: eight connections at their own cap. */
export const DEFAULT_MAX_WAITING_BYTES = 256 << 20;
/** Past the limit, a holder whose peer has taken nothing for this long is closed as soon as its
 *  turn comes (after its own answers waiting for room were dropped), before later holders lose
 *  any answer. */
export const SHED_IDLE_MS = 1000;

/** Something told once the runtime is no longer pressed (a connection's room, room.ts). */
export interface Easing { changed(): void }

/** A holder of waiting messages (a connection), closed by the ledger when its peer has gone
 *  longest without taking any, past the limit. */
export interface WaitingHolder {
  /** Past the limit, before any holder is closed: drops what it holds that can go without its
   *  connection (answers waiting for room: their calls fail), telling the ledger (set()). */
  relieve?(total: number, limit: number): void;
  /** Holds `held` of the `total` counted across the runtime, over `limit`, and its peer took
   *  nothing for `idleMs`: it is to close now (and then tell the ledger it holds nothing). */
  shed(held: number, total: number, limit: number, idleMs: number): void;
}

/** What a holder holds, and since when its peer took none of it. */
interface Held { bytes: number; since: number }

export class WaitingLedger {
  /** In the order their peers last took something (or began to hold): the first has gone longest
   *  without. */
  readonly #held = new Map<WaitingHolder, Held>();
  #total = 0;
  #shedding = false;
  /** Told once the runtime is no longer pressed. */
  #easing = new Set<Easing>();

  constructor(readonly limit: number) {}

  /** What the runtime's connections hold, counted as outbox.ts counts it. */
  get total(): number { return this.#total; }
  /** The connections hold half the limit or more: those holding anything make nothing more for
   *  their peers until it eases (room.ts), so that honest demand backs up before the limit sheds. */
  get pressed(): boolean { return this.#total >= this.limit / 2; }
  /** Tells `easing` (once) when the runtime is no longer pressed. */
  watch(easing: Easing): void { this.#easing.add(easing); }
  /** `easing` is no longer told (its connection closed: kept, a closed connection's room stayed
   *  reachable for as long as the runtime was pressed, about 22 KB each; a helper session's
   *  review). */
  unwatch(easing: Easing): void { this.#easing.delete(easing); }

  /** `holder` now holds `bytes` (0: nothing); `progressed`: its peer just took some. Past the
   *  limit, holders are shed in a microtask of their own: not inside the outbox's flush that
   *  reported it. */
  set(holder: WaitingHolder, bytes: number, progressed = false): void {
    const held = this.#held.get(holder);
    this.#total += bytes - (held?.bytes ?? 0);
    if (bytes === 0) {
      this.#held.delete(holder);
    } else if (held === undefined || progressed) {
      // To the end of the order: this peer took something just now (or holds for the first time).
      this.#held.delete(holder);
      this.#held.set(holder, { bytes, since: performance.now() });
    } else {
      held.bytes = bytes;
    }
    if (this.#total > this.limit && !this.#shedding) {
      this.#shedding = true;
      queueMicrotask(this.#shed);
    }
    if (this.#easing.size > 0 && !this.pressed) {
      const easing = [...this.#easing];
      this.#easing.clear();
      for (const one of easing) one.changed();
    }
  }

  readonly #shed = (): void => {
    this.#shedding = false;
    // In the order their peers last took something. First what can go without a connection:
    // answers waiting for room (an honest client that asked for more than the limit at once loses
    // those calls, not all); a holder whose peer has taken nothing for SHED_IDLE_MS is closed
    // there and then if that was not enough, before any later holder's answers are dropped (a
    // peer holding messages alone must not have honest peers' answers dropped while it stays).
    const now = performance.now();
    for (const [holder, held] of [...this.#held]) {
      if (this.#total <= this.limit) return;
      holder.relieve?.(this.#total, this.limit);
      if (this.#total > this.limit && now - held.since >= SHED_IDLE_MS) this.#close(holder);
    }
    for (const holder of [...this.#held.keys()]) {
      if (this.#total <= this.limit) return;
      this.#close(holder);
    }
  };

  /** Closes `holder` (shed), taken off the ledger first: a holder that failed to tell the ledger
   *  it let go must not be shed twice. */
  #close(holder: WaitingHolder): void {
    const held = this.#held.get(holder);
    if (held === undefined) return;
    const total = this.#total;
    this.#held.delete(holder);
    this.#total -= held.bytes;
    holder.shed(held.bytes, total, this.limit, performance.now() - held.since);
  }
}
