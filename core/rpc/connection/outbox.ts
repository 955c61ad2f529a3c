// A connection's frames on their way out. The frames made in one turn of the event loop leave
// together, BATCH_FRAMES (and the peer's maxFrame) to a UCX message (docs/wire.md "Control
// messages"): with many calls in flight that divides the messages and the wake-ups they cost. A
// turn's frames in one message, however many, made the two sides take turns on one batch (each
// idle while the other worked on it); in messages of 16 the peer starts on the first while this
// side makes the rest. On the 2-core box that took 64 calls in flight from 85-103k calls/s to
// 112-124k (README, Benchmarks). A frame nobody waits for joins the next message (sendSoon).
import { FRAME_HEADER, packMessage, type WireFrame } from '../../wire/message.ts';
import { FRAME_WEIGHT_BYTES } from './window-frames.ts';
import { PeerWindow } from './peer-window.ts';
import { BacklogWatch, FRAME_HELD_BYTES, MAX_BLOCKED_BYTES } from './backlog-watch.ts';
import type { FrameDone } from './posted-frame.ts';
import { Company, SOON_MS, type QueuedFrame } from './company.ts';

export { FRAME_HELD_BYTES, MAX_BLOCKED_BYTES, SOON_MS };

/** Frames a message takes before it leaves within the turn instead of at its end. */
export const BATCH_FRAMES = 16;
/** Bytes of messages in UCX's hands (sent, not yet completed) a connection keeps without counting
 *  them towards maxWaitingBytes: a default window's worth (window.ts). An honest peer that is
 *  slow to read has that much on its way, and counting it let busy honest clients alone trip the
 *  runtime's limit (3 clients pausing with 12 MiB of answers on their way against a 32 MiB limit:
 *  25 closed in 30 s, a helper session's measurement); what a peer's larger window lets past it
 *  counts. */
export const FREE_FLIGHT_BYTES = 8 << 20;
/** What the peer must take, in window weight (window-frames.ts messageWeight: bytes, and 1 KiB a
 *  frame), of messages that waited for its window or were in UCX's hands, before it counts as
 *  taking something (waiting.ts closes first the one that went longest without): a 16 KiB credit
 *  every 20-50 ms kept attackers behind an honest client that paused (a helper session's attack,
 *  2026-12-06). */
export const PROGRESS_BYTES = 1 << 20;
/** What a waiting frame's body becomes once packed: the message holds its bytes. */
const PACKED = new Uint8Array(0);

/** What a packed message of `group` weighs in the peer's window (window-frames.ts messageWeight). */
function weightOf(message: Uint8Array, group: readonly QueuedFrame[]): number {
  return message.length + group.length * FRAME_WEIGHT_BYTES;
}

/** What an outbox needs of its connection. */
export interface OutboxLink {
  /** Largest message the peer takes (its HELLO's maxFrame). */
  maxFrame(): number;
  /** What queued frames fail with once the connection has closed; undefined while it is open. */
  refusal(): unknown;
  /** Hands one packed message to UCX: undefined when UCX sent it at once, else what settles
   *  when it did. */
  deliver(message: Uint8Array): Promise<void> | undefined;
  /** Told what a FrameDone threw (a bug of its own) once every frame of its message was told its
   *  fate; left out, it is rethrown as an uncaught exception in a microtask of its own. */
  fault?(error: unknown): void;
  /** The frames made of what waits for company on the link's side (a connection's batched
   *  reports), asked for as a message takes the frames waiting for company; none when it has
   *  nothing or could not make them. */
  soon?(): WireFrame[];
  /** More than MAX_BLOCKED_BYTES wait for the peer's window, or calls wait to add to what does,
   *  `bytes` of messages in `frames` frames, the oldest for `oldestMs`, at least stallMs(). */
  overflow?(bytes: number, frames: number, oldestMs: number): void;
  /** How long the oldest message may wait for the peer's window while more than
   *  MAX_BLOCKED_BYTES wait, or calls wait to add to them (a connection's liveness time); left
   *  out, overflow is never told. */
  stallMs?(): number;
  /** Calls wait for room to add to what waits for the peer (room.ts): the oldest waiting message
   *  is then watched whatever the backlog's size. */
  callsWait?(): boolean;
  /** Messages wait for the peer's window after a flush or a credit (the window may WANT a loan
   *  for the first: shortfall()). */
  blocked?(): void;
  /** What waits for the peer changed: it now counts `held` (0 once nothing waits): messages
   *  waiting for its window (bytes plus FRAME_HELD_BYTES a frame), and bytes of messages handed to
   *  UCX whose send has not completed past FREE_FLIGHT_BYTES (the peer's socket is not taking
   *  them). `progressed`: the peer took PROGRESS_BYTES since it last did (credit let messages go,
   *  sends completed). Called only when `held` changed or the peer progressed. */
  waiting?(held: number, progressed: boolean): void;
}

/** A packed message waiting for the peer's window, with the frames it carries and its weight. */
interface BlockedMessage { message: Uint8Array; group: QueuedFrame[]; weight: number; at: number }

export class Outbox {
  #queue: QueuedFrame[] = [];
  /** Bytes of the frames in #queue (the turn's, not yet packed). */
  #queuedBytes = 0;
  /** Frames waiting for company (company.ts): due, they leave on their own unless this turn's
   *  flush is about to take them. */
  readonly #company = new Company(() => { if (this.#queue.length === 0) this.#flush(); }, () => this.link.soon?.() ?? []);
  /** The end-of-turn flush is queued (one per turn, however many early flushes went before it). */
  #scheduled = false;
  /** The peer's window as this side counts it (peer-window.ts). */
  readonly #window = new PeerWindow();
  /** Messages waiting for the window, in order from #blockedHead; none leaves before those ahead
   *  of it (an index, not shift(): there may be many). */
  #blocked: BlockedMessage[] = [];
  #blockedHead = 0;
  #blockedBytes = 0;
  #blockedFrames = 0;
  /** Bytes of messages handed to UCX whose send has not completed. */
  #flightBytes = 0;
  /** Bytes the peer took since it last counted as taking something (PROGRESS_BYTES). */
  #taken = 0;
  /** What link.waiting was last told. */
  #reported = 0;
  /** close() was called: sends still in UCX's hands are no longer counted. */
  #closed = false;
  /** Says when the oldest waiting message has waited the link's stallMs while more than
   *  MAX_BLOCKED_BYTES wait (backlog-watch.ts). */
  readonly #watch = new BacklogWatch({
    holds: () => this.#holds,
    oldestSince: () => this.#blocked[this.#blockedHead]!.at,
    stalled: (oldestMs) => this.link.overflow?.(this.#blockedBytes, this.#blockedFrames, oldestMs),
  });

  constructor(private readonly link: OutboxLink) {}

  /** Queues an encoded frame; resolves once the message that carries it was sent. */
  send(kind: number, call: number, body: Uint8Array): Promise<void> {
    return new Promise<void>((resolve, reject) => this.post(kind, call, body, { sent: resolve, failed: reject }));
  }

  /** Queues an encoded frame and tells `done` what became of it: no promise (the small call's
   *  frames). The frame that fills a message sends it at once, so `done` may be told before
   *  post returns. */
  post(kind: number, call: number, body: Uint8Array, done: FrameDone): void {
    if (!this.#scheduled) {
      this.#scheduled = true;
      queueMicrotask(() => {
        this.#scheduled = false;
        // An early flush may have taken every frame: frames sent soon then keep waiting.
        if (this.#queue.length > 0) this.#flush();
      });
    }
    this.#queue.push({ kind, call, body, done });
    this.#queuedBytes += body.length;
    if (this.#queue.length + this.#company.count >= BATCH_FRAMES) this.#flush();
  }

  /** Queues a frame the peer needs soon but nobody waits for (a SENT report): it joins the next
   *  message, or leaves on its own after SOON_MS. With calls in flight that is the next REQUEST
   *  or RESPONSE: no message and no wake-up of its own. */
  sendSoon(kind: number, call: number, body: Uint8Array): void {
    this.#company.add(kind, call, body);
  }

  /** The link has something that waits for company as sendSoon's frames do: link.soon() makes
   *  its frame when a message takes them. */
  soonPending(): void {
    this.#company.pending();
  }

  /** Sends the frames waiting for company now, on their own (a graceful close); frames queued
   *  with send() in this turn stay queued, to fail with the connection. */
  flushSoon(): void {
    if (this.#company.count === 0) return;
    const queued = this.#queue;
    const queuedBytes = this.#queuedBytes;
    this.#queue = [];
    this.#flush();
    this.#queue = queued;
    this.#queuedBytes = queuedBytes;
  }

  /** The peer's window (its HELLO's or AUTH's `win`), in what messages weigh (window-frames.ts
   *  messageWeight): what was sent before it counts against it. */
  openWindow(bytes: number): void {
    this.#window.open(bytes);
    this.#release();
  }

  /** The peer's window grew to `bytes` (READY's `win`): the difference is room now. */
  widenWindow(bytes: number): void {
    if (this.#window.widen(bytes)) this.#release();
  }

  /** What the first waiting message needs beyond the window's room, when it is larger than half
   *  the peer's window (PeerWindow.shortfall); 0 when none waits, it fits, or it is smaller. */
  shortfall(): number {
    const head = this.#blocked[this.#blockedHead];
    return head === undefined ? 0 : this.#window.shortfall(head.weight);
  }

  /** The peer lent `bytes` for the first waiting message (shortfall() said it needs no more): it
   *  goes now, and what it leaves of the loan is gone. */
  borrow(bytes: number): void {
    this.#window.lend(bytes);
    this.#release();
    this.#window.lend(0);
  }

  /** The peer took `bytes` more of this side's messages (CREDIT on call 0): as many waiting
   *  messages leave as now fit. */
  grant(bytes: number): void {
    this.#window.grant(bytes);
    this.#release();
  }

  /** A message sent on the connection without the outbox (the server's HELLO), of weight `bytes`:
   *  the peer counts it. */
  sentOutside(bytes: number): void { this.#window.sent(bytes); }

  /** Bytes of messages waiting for the peer's window. */
  get blockedBytes(): number { return this.#blockedBytes; }
  /** What it holds for the peer, as link.waiting is told it (waiting.ts counts it). */
  get held(): number { return this.#held; }
  /** Whether more may be made for the peer now (backpressure, room.ts): what waits for it, or is
   *  about to (the turn's frames, not yet packed), is within MAX_BLOCKED_BYTES, and is nothing at
   *  all while the runtime is `pressed`. */
  hasRoom(pressed: boolean): boolean {
    const pending = this.#blockedBytes + this.#blockedFrames * FRAME_HELD_BYTES + this.#queuedBytes;
    return pending <= MAX_BLOCKED_BYTES && !(pending > 0 && pressed);
  }
  /** What every message sent on the connection so far weighs (sentOutside's included). */
  get sentBytes(): number { return this.#window.sentBytes; }
  /** What the peer may credit back of it: sentBytes less what loans paid for. */
  get creditable(): number { return this.#window.creditable; }

  /** Drops the frames waiting for company (the connection closed; nobody waits for them), and
   *  fails those waiting for the window. */
  close(): void {
    this.#closed = true;
    this.#watch.stop();
    this.#company.clear();
    const blocked = this.#blocked.slice(this.#blockedHead);
    this.#blocked = [];
    this.#blockedHead = 0;
    this.#blockedBytes = 0;
    this.#blockedFrames = 0;
    // Sends still in UCX's hands settle with the endpoint's close: nothing to count any more.
    this.#flightBytes = 0;
    this.#report(false);
    const refusal = this.link.refusal();
    for (const { group } of blocked) this.#tell(group, { error: refusal });
  }

  #flush(): void {
    const soon = this.#company.take();
    const queue = soon.length > 0 ? [...soon, ...this.#queue] : this.#queue;
    this.#queue = [];
    this.#queuedBytes = 0;
    const refusal = this.link.refusal();
    if (refusal !== undefined) {
      // Closed since these were queued: none of them was handed to UCX.
      this.#tell(queue, { error: refusal });
      return;
    }
    const maxFrame = this.link.maxFrame();
    let start = 0;
    while (start < queue.length) {
      // Up to BATCH_FRAMES frames, as many as fit in one peer message.
      let end = start;
      let size = 0;
      while (end < queue.length && end - start < BATCH_FRAMES && (end === start || size + FRAME_HEADER + queue[end]!.body.length <= maxFrame)) {
        size += FRAME_HEADER + queue[end]!.body.length;
        end += 1;
      }
      const group = queue.slice(start, end);
      start = end;
      const message = packMessage(group);
      const weight = weightOf(message, group);
      if (this.#blockedBytes === 0 && this.#window.takes(weight)) {
        this.#deliver(message, group, weight);
        continue;
      }
      // The peer's window is shut: the message waits, behind any already waiting; its frames keep
      // their outcome, not their bytes.
      for (const frame of group) frame.body = PACKED;
      this.#blocked.push({ message, group, weight, at: performance.now() });
      this.#blockedBytes += message.length;
      this.#blockedFrames += group.length;
      this.#report(false);
      // Watched whenever a message blocks and the backlog holds: over the cap, or with calls
      // waiting for room. Calls that began to wait before anything blocked were never watched
      // otherwise, and peers that took nothing kept them for ever (a helper session's review:
      // 34 such peers filled maxCalls for a minute, crediting nothing).
      this.watchBacklog();
    }
    if (this.#blockedHead < this.#blocked.length) this.link.blocked?.();
  }

  /** What the messages waiting for the window, and those in UCX's hands past FREE_FLIGHT_BYTES,
   *  count (waiting.ts); those waiting for the window alone count towards MAX_BLOCKED_BYTES
   *  (those in UCX's hands are bounded by the peer's window, window.ts MAX_WINDOW_BYTES). */
  get #held(): number {
    return this.#blockedBytes + this.#blockedFrames * FRAME_HELD_BYTES + Math.max(0, this.#flightBytes - FREE_FLIGHT_BYTES);
  }

  /** More than MAX_BLOCKED_BYTES wait for the peer's window (bytes, and FRAME_HELD_BYTES a frame). */
  get #overCap(): boolean {
    return this.#blockedBytes + this.#blockedFrames * FRAME_HELD_BYTES > MAX_BLOCKED_BYTES;
  }

  /** A message waits for the window, and more than MAX_BLOCKED_BYTES do or calls wait to add to
   *  them (the link's callsWait): the peer must take the oldest within the link's stallMs. */
  get #holds(): boolean {
    return !this.#closed && this.#blockedHead < this.#blocked.length && (this.#overCap || this.link.callsWait?.() === true);
  }

  /** Starts watching how long the oldest waiting message waits, if the backlog holds (#holds):
   *  past the cap, or when a call begins to wait for room. */
  watchBacklog(): void {
    if (this.link.overflow !== undefined && this.#holds) this.#watch.start(this.link.stallMs?.());
  }

  /** Tells the link what is held now, where that changed or the peer counts as having taken
   *  something (`took` bytes more just now). */
  #report(took: number | false): void {
    let progressed = false;
    if (took !== false) {
      this.#taken += took;
      if (this.#taken >= PROGRESS_BYTES) {
        this.#taken = 0;
        progressed = true;
      }
    }
    const held = this.#held;
    if (held === this.#reported && !progressed) return;
    this.#reported = held;
    this.link.waiting?.(held, progressed);
  }

  /** Sends the waiting messages that the window now takes, in order. */
  #release(): void {
    if (this.#blockedHead === this.#blocked.length) return;
    let released = 0;  // weight
    while (this.#blockedHead < this.#blocked.length && this.#window.takes(this.#blocked[this.#blockedHead]!.weight)) {
      const { message, group, weight } = this.#blocked[this.#blockedHead]!;
      this.#blocked[this.#blockedHead] = undefined!;
      this.#blockedHead += 1;
      if (this.#blockedHead === this.#blocked.length) {
        this.#blocked = [];
        this.#blockedHead = 0;
      }
      this.#blockedBytes -= message.length;
      this.#blockedFrames -= group.length;
      released += weight;
      if (this.link.refusal() !== undefined) {
        this.#tell(group, { error: this.link.refusal() });
        continue;
      }
      this.#deliver(message, group, weight, true);
    }
    if (released > 0) this.#report(released);
    if (this.#blockedHead < this.#blocked.length) this.link.blocked?.();
  }

  /** Hands `message` (of `weight` in the peer's window) to the link; its frames are told. Its
   *  weight counts as taken by the peer once: when its send completes, or (`released`) already
   *  when the peer's credit let it go (a helper session's review found both counted). */
  #deliver(message: Uint8Array, group: QueuedFrame[], weight: number, released = false): void {
    // The peer counts the same: the first message after its loan was taken may use the loan.
    this.#window.sent(weight);
    let sent: Promise<void> | undefined;
    try {
      sent = this.link.deliver(message);
    } catch (error) {
      // A link that throws instead of rejecting fails this message's frames, not the flush.
      this.#tell(group, { error });
      return;
    }
    if (sent === undefined) {
      this.#tell(group);
      return;
    }
    this.#flightBytes += message.length;
    this.#report(false);
    const done = (): void => {
      // close() let go of every message in UCX's hands.
      if (this.#closed) return;
      this.#flightBytes -= message.length;
      this.#report(released ? 0 : weight);
    };
    sent.then(() => {
      done();
      this.#tell(group);
    }, (error: unknown) => {
      done();
      this.#tell(group, { error });
    });
  }

  /** Tells each of `frames` it was sent (no `error`) or failed. A FrameDone that throws (a bug of
   *  its own) must not leave the frames after it untold, or the flush's later messages unsent, nor
   *  come out of post() for whoever's frame filled the message: the first one thrown goes to the
   *  link's fault, by default rethrown as an uncaught exception in a microtask of its own. */
  #tell(frames: readonly QueuedFrame[], error?: { error: unknown }): void {
    let thrown: { error: unknown } | undefined;
    for (const frame of frames) {
      try {
        if (error === undefined) frame.done.sent();
        else frame.done.failed(error.error);
      } catch (caught) {
        thrown ??= { error: caught };
      }
    }
    if (thrown === undefined) return;
    const fault = thrown.error;
    if (this.link.fault !== undefined) this.link.fault(fault);
    else queueMicrotask(() => { throw fault; });
  }
}
