// A connection's message window (docs/wire.md "Message window"). UCX reads every eager message a
// peer sends into its unexpected queue, whether or not anyone is reading: a peer that sends faster
// than this side reads (messages that are costly to decode) grows that queue without end (a flood
// of 256 KiB messages took a server to 15 GB in 20 s). How far behind the reader is cannot be seen
// from here, since the queue is UCX's. So the peer must show it: it may send `size` bytes of
// messages, plus what the credits it acknowledged gave back. Each credit carries an id drawn at
// random, which the peer can only learn by receiving the credit, and it echoes that id (ACK)
// before sending the bytes the credit gave: a peer that runs ahead of its credits has nothing to
// echo, and is found out, before any of its messages past the window is decoded, once the reader
// reaches them. The window's own frames travel in messages of their own that are not counted, so
// that two sides whose windows are both shut can still give each other credit.
import { getRandomValues } from 'node:crypto';
import { Code, GdrpcError } from '../../errors.ts';
import { FrameKind } from '../../wire/frames.ts';
import type { WindowFrameBody, WindowFrameKind } from './window-frames.ts';
import type { Borrower } from '../runtime/window-loans.ts';

/** Smallest window a peer may announce (the handshake is refused below it). */
export const MIN_WINDOW_BYTES = 64 * 1024;
/** Largest window a peer may announce, and a side's own at most (a server's maxFrameBytes of up to
 *  half of it: WINDOW_MESSAGES). The peer's window is what this side hands to UCX for it before
 *  waiting for credit: a peer that announced 2^31 bytes, or none, and stopped reading its socket
 *  had a server hold about 37 MiB for it (in UCX's send queue) by the time liveness closed it,
 *  1.3 GB for 32 such peers (a helper session's attack, 2026-12-06). Now what waits in that queue
 *  is counted across the runtime too (maxWaitingBytes). */
export const MAX_WINDOW_BYTES = 256 << 20;
/** The window a connection opens with (`win`) when its whole window (`wmax`) is larger: what a
 *  peer may have in UCX's queue at any time without a loan. A message that needs more waits for
 *  one (WANT), lent from the runtime's budget (window-loans.ts), for that message alone. */
export const OPENING_WINDOW_BYTES = 256 * 1024;

/** Why an announced window (HELLO's or AUTH's `win`, and `wmax`) is refused: `win` is required,
 *  both are bounded, and `wmax` is at least `win`. */
export function windowRefusal(win: number | undefined, wmax?: number): string | undefined {
  if (win === undefined) return 'no message window (`win`: every gdrpc peer announces one; docs/wire.md "Message window")';
  if (win < MIN_WINDOW_BYTES || win > MAX_WINDOW_BYTES) return `a message window of ${win} bytes (from ${MIN_WINDOW_BYTES} to ${MAX_WINDOW_BYTES})`;
  if (wmax !== undefined && (wmax < win || wmax > MAX_WINDOW_BYTES)) return `a largest message window (\`wmax\`) of ${wmax} bytes (from the window's ${win} to ${MAX_WINDOW_BYTES})`;
  return undefined;
}
/** Smallest credit a peer may give: a quarter of the smallest window. Credits are bounded by what
 *  this side sent, so this bounds how many uncounted messages of credits a peer can send. Loans
 *  are not held to it: there is one per WANT. */
export const MIN_CREDIT_BYTES = MIN_WINDOW_BYTES / 4;
/** Random ids drawn at once (a credit is given per quarter window). */
const ID_BATCH = 64;

/** A credit: `n` bytes, acknowledged by echoing `id`; a loan when it answers a WANT. */
export interface Credit { n: number; id: number; loan?: true }

/** Where the loans a window makes come from and go back to (the runtime's WindowLoans). */
export interface Lender {
  /** `who` asks for `bytes`: its lent() is called when they are lent (perhaps at once). */
  ask(who: Borrower, bytes: number): void;
  /** `bytes` of lent window came back. */
  give(bytes: number): void;
  /** `who` no longer waits for what it asked. */
  withdraw(who: Borrower): void;
}

/** The receiving half's count: what the peer sent, what it may send, the credits given. */
export class ReceiveWindow {
  #received = 0;
  /** What the credits the peer acknowledged, and the loans it spent, added to its limit. */
  #acked = 0;
  #unread = 0;
  /** Loans the peer spent and reading has not paid back yet: held back from the next credits. */
  #owed = 0;
  /** A loan the peer took (acknowledged without declining): the next counted message may use it,
   *  and what it leaves unused is gone. */
  #taken = 0;
  readonly #given: Credit[] = [];
  readonly #ids = new Uint32Array(ID_BATCH);
  #nextId = ID_BATCH;

  /** `size`: the window this side announced (HELLO's or AUTH's `win`; READY's may widen it);
   *  `before`: the bytes the peer may send before admission; `lender` takes back what loans leave. */
  constructor(size: number, private readonly before: number, private readonly lender?: Lender) {
    this.#size = size;
  }

  #size: number;
  /** The window this side announced, widened by READY's `win` where it was. */
  get size(): number { return this.#size; }
  /** The window is `size` bytes from now on (never less than it was): the peer may send the
   *  difference beyond what it could, as if credited. */
  widen(size: number): void { this.#size = Math.max(this.#size, size); }

  /** Bytes received so far. */
  get received(): number { return this.#received; }
  /** A loan the peer took and has not used yet (its next counted message uses it). */
  get taken(): boolean { return this.#taken > 0; }
  /** Bytes the peer may have sent by now (a loan it took not included). */
  limit(admitted: boolean): number {
    return admitted ? this.#size + this.#acked : Math.min(this.before, this.#size);
  }
  /** Credits given that the peer has not acknowledged yet (loans not included): it may send
   *  their bytes as soon as it has them. */
  get unacknowledged(): number {
    let given = 0;
    for (const credit of this.#given) if (credit.loan !== true) given += credit.n;
    return given;
  }
  /** Lent window not back yet: loans given and not acknowledged, taken and not used, spent and
   *  not paid back. */
  get outstanding(): number {
    let lent = this.#owed + this.#taken;
    for (const credit of this.#given) if (credit.loan === true) lent += credit.n;
    return lent;
  }

  /** Counts a message of `length` bytes before it is read: false when it ran past the limit. The
   *  first message after a loan was taken may use the loan; what it leaves goes back at once. */
  arrived(length: number, admitted: boolean): boolean {
    this.#received += length;
    if (!admitted || this.#taken === 0) return this.#received <= this.limit(admitted);
    const limit = this.limit(true);
    const spent = Math.min(this.#taken, Math.max(0, this.#received - limit));
    const within = this.#received <= limit + this.#taken;
    const unused = this.#taken - spent;
    this.#taken = 0;
    this.#acked += spent;
    this.#owed += spent;
    if (unused > 0) this.lender?.give(unused);
    return within;
  }

  /** A message of `length` bytes was read: a credit to give once a quarter of the window was,
   *  less what loans spent are owed (paid back first, to the lender). */
  read(length: number): Credit | undefined {
    this.#unread += length;
    if (this.#unread < this.#size / 4) return undefined;
    if (this.#owed > 0) {
      const repaid = Math.min(this.#owed, this.#unread);
      this.#owed -= repaid;
      this.#unread -= repaid;
      this.lender?.give(repaid);
      if (this.#unread < MIN_CREDIT_BYTES) return undefined;
    }
    const credit = { n: this.#unread, id: this.#drawId() };
    this.#unread = 0;
    this.#given.push(credit);
    return credit;
  }

  /** A loan of `n` bytes for the peer's next message, in answer to its WANT. */
  lend(n: number): Credit {
    const credit: Credit = { n, id: this.#drawId(), loan: true };
    this.#given.push(credit);
    return credit;
  }

  /** The peer echoed credit `id` (declining it: `declined`, for a loan only): it must be the
   *  oldest not yet acknowledged. Says what was acknowledged, undefined for a wrong ACK. */
  ack(id: number, declined = false): Credit | undefined {
    const oldest = this.#given[0];
    if (oldest === undefined || oldest.id !== id || (declined && oldest.loan !== true)) return undefined;
    this.#given.shift();
    if (oldest.loan !== true) this.#acked += oldest.n;
    else if (declined) this.lender?.give(oldest.n);
    else {
      // One loan at a time (MessageWindow.want): one taken before is not dropped uncounted.
      if (this.#taken > 0) this.lender?.give(this.#taken);
      this.#taken = oldest.n;
    }
    return oldest;
  }

  #drawId(): number {
    if (this.#nextId === ID_BATCH) {
      getRandomValues(this.#ids);
      this.#nextId = 0;
    }
    // 30 bits: a small integer to V8 (a uint32 past 2^30 is a heap number, and the first credit
    // deoptimized the message path it is made on); a guess is still one in 2^30, and a wrong ACK
    // closes the connection.
    return this.#ids[this.#nextId++]! & 0x3fff_ffff;
  }
}

/** What the window needs of its connection. */
export interface WindowLink {
  readonly peer: string;
  readonly admitted: boolean;
  /** The peer broke the window's rules: report it and close the connection now. */
  refuse(error: GdrpcError): void;
  /** Sends a window frame at once, in a message of its own that the peer does not count. */
  sendWindowFrame(kind: WindowFrameKind, body: WindowFrameBody): void;
  /** Bytes of the (counted) messages this side has sent so far, less what loans paid for. */
  sentBytes(): number;
  /** The peer gave `n` bytes of this side's window back: waiting messages may go. */
  grant(n: number): void;
  /** What the next waiting message needs beyond the window's room now, when it is one that credit
   *  alone may never let go (larger than half the peer's `win`); else 0. */
  shortfall(): number;
  /** The peer lent `n` bytes for the next waiting message, which goes now. */
  borrow(n: number): void;
  /** How long the peer has to acknowledge a loan (ms): its liveness time. */
  readonly loanAckMs: number;
  /** Whether a control message of the peer's own waits unread (its ACK may be in it). */
  messageWaiting(): boolean;
}

/** Both halves of a connection's window, on the connection's behalf. */
export class MessageWindow implements Borrower {
  readonly #receive: ReceiveWindow;
  /** The peer ran past its window: nothing more from it is read. */
  #overrun = false;
  /** Bytes of this side's messages the peer credited back so far (loans not included). */
  #credited = 0;
  /** This side sent a WANT that no loan answered yet. */
  #wanting = false;
  /** The peer's WANT is waiting for a loan, its loan for an ACK, or the loan it took for the
   *  message that uses it: it may not want again. */
  #peerWants = false;
  /** The peer's WANT waits for the lender (no loan made for it yet). */
  #asked = false;
  /** The window the peer may grow this side's to with a loan (its `wmax`), past its `win`. */
  #peerLends = false;
  /** The window closed: loans that come now go straight back. */
  #closed = false;
  /** Runs out when a loan given was not acknowledged in time (loanAckMs). */
  #loanTimer: NodeJS.Timeout | undefined;

  /** `size`: this side's window (`win`); `max`: what a loan may make it for one message (`wmax`). */
  constructor(size: number, readonly max: number, before: number, private readonly link: WindowLink, private readonly lender?: Lender) {
    this.#receive = new ReceiveWindow(size, before, lender);
  }

  /** This side's window (`win`, widened by READY's where it was). */
  get size(): number { return this.#receive.size; }

  /** This side's window grows to `size` (at most `max`): the server's at admission, before READY
   *  tells the peer (docs/wire.md "Message window"). */
  widen(size: number): void { this.#receive.widen(Math.min(size, this.max)); }

  get overrun(): boolean { return this.#overrun; }

  /** Weight of messages the peer may still send before this side reads more of them: its limit,
   *  the credits given and not yet acknowledged (their ACKs may be among what it sends), every
   *  loan given and not paid back, and the most a loan for a WANT still waiting may give, less
   *  what it sent and this side read (a helper session's review found the first form, without
   *  the credits not yet acknowledged, short by a quarter window for every one of them: honest
   *  peers sending 100 KB messages were closed). */
  room(): number {
    const receive = this.#receive;
    const wanted = this.#asked ? this.max : 0;
    return Math.max(0, receive.limit(this.link.admitted) + receive.unacknowledged + receive.outstanding + wanted - receive.received);
  }

  /** The peer's window has room to lend (its `wmax` over its `win`): this side may WANT. */
  peerLends(): void { this.#peerLends = true; }

  /** Counts a message of `length` bytes against the peer's window before it is read; false, and
   *  the connection refused, when the peer ran past it. */
  arrived(length: number): boolean {
    if (this.#overrun) return false;
    const { admitted } = this.link;
    const taken = this.#receive.taken;
    const within = this.#receive.arrived(length, admitted);
    if (taken) this.#loanDone();
    if (within) return true;
    this.#overrun = true;
    const limit = this.#receive.limit(admitted);
    this.link.refuse(new GdrpcError(Code.RESOURCE_EXHAUSTED, `${this.link.peer} sent ${this.#receive.received - limit} bytes of messages past its window ` +
      `(${admitted ? `${this.size} bytes, the credits it acknowledged and the loans it used` : `${limit} bytes before admission`}; docs/wire.md "Message window")`));
    return false;
  }

  /** A counted message of `length` bytes was read: once a quarter of the window was, a CREDIT on
   *  call 0 gives it back. */
  read(length: number): void {
    if (!this.link.admitted || this.#overrun) return;
    // Credits not yet acknowledged number four or so at most: without ACKs the peer may send one
    // window, which earns four credits.
    const credit = this.#receive.read(length);
    if (credit !== undefined) this.link.sendWindowFrame(FrameKind.Credit, credit);
  }

  /** The peer's CREDIT on call 0: acknowledged at once, ahead of the messages that use it; an
   *  error for a credit no reader could have given (too small, or more than this side sent), or a
   *  loan nobody asked for. A loan is taken when it lets the waiting message go, else declined. */
  credit(n: number, id: number | undefined, loan?: boolean): GdrpcError | undefined {
    if (id === undefined) return new GdrpcError(Code.INVALID_ARGUMENT, 'a CREDIT on call 0 without an id');
    if (loan === true) {
      if (!this.#wanting) return new GdrpcError(Code.INVALID_ARGUMENT, `a loan of ${n} bytes of window that no WANT asked for`);
      this.#wanting = false;
      const short = this.link.shortfall();
      if (short > 0 && short <= n) {
        this.link.sendWindowFrame(FrameKind.Ack, { id });
        // The message goes; the outbox tells blocked() of any still waiting, which may WANT.
        this.link.borrow(n);
      } else {
        this.link.sendWindowFrame(FrameKind.Ack, { id, no: true });
        this.#want();
      }
      return undefined;
    }
    if (n < MIN_CREDIT_BYTES || this.#credited + n > this.link.sentBytes()) {
      return new GdrpcError(Code.INVALID_ARGUMENT, `a CREDIT of ${n} bytes, with ${this.#credited} credited before, for ${this.link.sentBytes()} bytes sent (at least ${MIN_CREDIT_BYTES} a credit)`);
    }
    this.#credited += n;
    this.link.sendWindowFrame(FrameKind.Ack, { id });
    this.link.grant(n);
    return undefined;
  }

  /** The peer's ACK: it must echo the oldest credit not yet acknowledged; `no` declines a loan. */
  ack(id: number, no?: boolean): GdrpcError | undefined {
    const credit = this.#receive.ack(id, no === true);
    if (credit === undefined) return new GdrpcError(Code.INVALID_ARGUMENT, `an ACK${no === true ? ' declining' : ''} of credit ${id}, which is not the oldest ${no === true ? 'loan ' : ''}this side gave`);
    // A loan declined is done with; one taken is done with once the next counted message used
    // it (arrived), which the loan's timer still waits for.
    if (credit.loan === true && no === true) this.#loanDone();
    return undefined;
  }

  /** The peer's loan was declined or used: it may WANT again. */
  #loanDone(): void {
    this.#peerWants = false;
    clearTimeout(this.#loanTimer);
    this.#loanTimer = undefined;
  }

  /** The peer's WANT waits for the runtime to lend (behind others' asks): the peer has nothing
   *  it may send meanwhile but window frames, so liveness excuses its silence. Once lent, the
   *  loan's timer bounds the wait for its ACK and its use. */
  get peerWaitsForLoan(): boolean { return this.#asked; }

  /** The peer's WANT: its next message needs `n` bytes more than its window has. One at a time:
   *  another before the loan for this one was acknowledged is an error, as is more than this
   *  side's whole window. */
  want(n: number): GdrpcError | undefined {
    if (!this.link.admitted) return undefined;
    if (this.#peerWants) return new GdrpcError(Code.INVALID_ARGUMENT, 'a WANT before the loan for the one before it was declined or used');
    if (n === 0 || n > this.max) return new GdrpcError(Code.INVALID_ARGUMENT, `a WANT of ${n} bytes of window (from 1 to ${this.max}, this side's largest window)`);
    this.#peerWants = true;
    this.#asked = true;
    if (this.lender === undefined) this.lent(n);
    else this.lender.ask(this, n);
    return undefined;
  }

  /** The runtime lends `n` bytes for the peer's WANT: a CREDIT with `loan` carries them, which the
   *  peer must acknowledge, and use or decline, within its liveness time unless messages of its
   *  own wait unread here (a gdrpc peer sends the message the loan is for right after its ACK;
   *  a peer that sent window frames alone meanwhile kept its liveness and the loan). */
  lent(n: number): void {
    this.#asked = false;
    if (this.#closed || this.#overrun) {
      this.lender?.give(n);
      return;
    }
    this.link.sendWindowFrame(FrameKind.Credit, this.#receive.lend(n));
    this.#armLoanTimer(n);
  }

  #armLoanTimer(n: number): void {
    clearTimeout(this.#loanTimer);
    this.#loanTimer = setTimeout(() => {
      this.#loanTimer = undefined;
      if (this.#closed || !this.#peerWants) return;
      if (this.link.messageWaiting()) {
        this.#armLoanTimer(n);
        return;
      }
      this.link.refuse(new GdrpcError(Code.RESOURCE_EXHAUSTED, `${this.link.peer} did not acknowledge and use a loan of ${n} bytes of message window within ${this.link.loanAckMs} ms (docs/wire.md "Message window")`));
    }, this.link.loanAckMs).unref();
  }

  /** A message waits (the outbox says so after each pass): one that needs a loan is WANTed, once
   *  until the loan comes. */
  blocked(): void { this.#want(); }

  #want(): void {
    if (this.#wanting || !this.#peerLends || !this.link.admitted) return;
    const short = this.link.shortfall();
    if (short === 0) return;
    this.#wanting = true;
    this.link.sendWindowFrame(FrameKind.Want, { n: short });
  }

  /** The connection closed: what it was lent goes back. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#loanTimer);
    this.lender?.withdraw(this);
    this.lender?.give(this.#receive.outstanding);
  }
}
