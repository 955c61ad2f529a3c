// Whose turn it is to be read, once the dispatcher has fallen behind (turns.ts): deficit round
// robin over the time each connection's messages take to read, by the reading thread's own time
// (ucx ownTimeClock: wall time less what the thread waited for a CPU). Wall time also counts what
// the process spent descheduled: on the 2-core box under the load bench's small calls (200
// connections x 64 in flight in 5 processes) 1-2% of the server's messages read in turns took 5-24
// ms of it, the connection each was charged to sat out a hundred rounds, and whole connections'
// calls waited 1-4 s (p99 1.7-2.4 s, max 4.2-6.5 s). CPU time, tried next, also leaves out what a
// synchronous handler spends blocked (a sleep, a file read, a lock): 16 peers whose calls blocked
// the thread 2 ms each held an honest client's ping 47-74 ms at the median against 5-7 ms by wall
// time (a helper session's attack, 2026-12-07); by own time 5-6 ms. Each turn adds TURN_QUANTUM_MS
// to a connection's balance (up to that much: an idle one saves nothing up), and its turn lasts
// while the balance is positive, so one whose message took 2 ms sits out eight turns, while one
// whose messages take microseconds reads them at every turn. The line's turn ends each round: the
// oldest control message, whoever it is for (the handshake's HELLO, messages of no connection; a
// connection's, charged to it and to the line, so that the line does not read a message of a
// connection in debt at every round). A round in which nothing was read is followed by a free one,
// where balances do not count for its first message: with nobody else to read, a debt holds nothing
// up. One message, not one of each connection: a free round that read one of each held an honest
// ping behind 60 connections' costly messages, 784 ms at the median and 2.0 s at worst (scratch,
// .scratch/f2.ts, 60 connections of 4 MB maps, CPU box).

/** What one turn adds to a connection's balance of reading time. */
export const TURN_QUANTUM_MS = 0.25;
/** What a message read in a turn is charged at least (a turn reads 250 of them at most). */
export const MIN_READ_CHARGE_MS = 0.001;

/** Whose reading time a turn counts: a connection, or the line. */
export interface TurnHolder { balance: number }

/** The order of turns over the holders `holders()` gives, round after round. */
export class ReadTurns<Holder extends TurnHolder> {
  /** The line: the oldest control message of any tag. */
  readonly line: TurnHolder = { balance: 0 };
  /** This round's holders still to come (undefined: the next turn begins a round). */
  #round: Iterator<Holder> | undefined;
  /** The line has had its turn in this round: the round ends with it. */
  #lineDone = false;
  #current: TurnHolder | undefined;
  /** Something was read in this round; the round before read nothing (balances do not count). */
  #readInRound = false;
  #free = false;

  constructor(private readonly holders: () => Iterator<Holder>) {}

  /** Whose turn is on (undefined between turns). */
  get current(): TurnHolder | undefined { return this.#current; }
  /** A free round (the one before read nothing) in which nothing was read yet: when the line finds
   *  nothing it can read either, nothing can be read now. */
  get idle(): boolean { return this.#free && !this.#readInRound; }

  /** Whose turn it is: the current holder while its turn lasts, else the next whose balance,
   *  topped up, is positive (any, in a free round until one message was read), and the line at
   *  each round's end. */
  next(): TurnHolder {
    if (this.#current !== undefined) return this.#current;
    for (;;) {
      this.#round ??= this.holders();
      const next = this.#round.next();
      if (next.done !== true) {
        if (ReadTurns.#topUp(next.value) || this.#free) return (this.#current = next.value);
        continue;
      }
      if (!this.#lineDone) {
        this.#lineDone = true;
        if (ReadTurns.#topUp(this.line) || this.#free || !this.#readInRound) return (this.#current = this.line);
      }
      // A new round: free if this one read nothing.
      this.#free = !this.#readInRound;
      this.#round = undefined;
      this.#lineDone = false;
      this.#readInRound = false;
    }
  }

  /** Adds a turn's quantum to `holder`'s balance (up to one quantum); whether it is positive. */
  static #topUp(holder: TurnHolder): boolean {
    holder.balance = Math.min(holder.balance + TURN_QUANTUM_MS, TURN_QUANTUM_MS);
    return holder.balance > 0;
  }

  /** A message of `holder`'s (the line's for one of no connection) took `took` ms to read in
   *  `turn`'s turn. The line's turn is one message; a connection's lasts while its balance is
   *  positive (in a free round, one message). */
  charge(turn: TurnHolder | undefined, holder: TurnHolder, took: number): void {
    holder.balance -= took;
    if (turn === this.line && holder !== this.line) this.line.balance -= took;
    this.#readInRound = true;
    if (this.#current === turn && (turn === this.line || this.#free || holder.balance <= 0)) this.#current = undefined;
    // The free round's one message was read: the rest of the round counts balances again.
    this.#free = false;
  }

  /** Something that cost next to nothing was done in this round (a message of no connection
   *  dropped unread): the round was not idle. */
  busy(): void { this.#readInRound = true; }

  /** The current turn ends (its holder has nothing it can read now). */
  end(): void { this.#current = undefined; }

  /** `holder` is gone: its turn, if on, ends. */
  forget(holder: TurnHolder): void {
    if (this.#current === holder) this.#current = undefined;
  }

  /** Back to the start: the next turn begins a new round. */
  reset(): void {
    this.#round = undefined;
    this.#lineDone = false;
    this.#current = undefined;
    this.#readInRound = false;
    this.#free = false;
  }
}
