// One gdrpc connection (one UCX endpoint), either side: frames out (outbox.ts; what they must pass
// and how their messages reach UCX, sender.ts) and in (inbound.ts), the message window, liveness,
// exposures, teardown. The client and server add their call handling on top through a FrameHandler.
import { setMaxListeners } from 'node:events';
import type { Endpoint } from '../../ucx/index.ts';
import { Code, GdrpcError } from '../../errors.ts';
import { FrameKind, type FrameBody } from '../../wire/frames.ts';
import { ConnectionKey, controlTag, dataTag, IdSequence } from '../../wire/tag.ts';
import type { TakenMessage } from '../../ucx/index.ts';
import { STALLED_RECEIVE_MS, type FrameSink } from '../runtime/dispatcher.ts';
import { Exposures } from './exposures.ts';
import { Outbox } from './outbox.ts';
import { Room } from './room.ts';
import type { FrameDone } from './posted-frame.ts';
import { Payloads } from './payloads.ts';
import { Liveness } from './liveness.ts';
import { TransferReports } from './reports.ts';
import { Sender, unprocessed } from './sender.ts';
import type { WaitingHolder } from '../runtime/waiting.ts';
import { Inbound, MAX_HANDSHAKE_MESSAGE_BYTES, type FrameHandler } from './inbound.ts';
import { MAX_WINDOW_BYTES, MessageWindow, OPENING_WINDOW_BYTES } from './window.ts';
import { FRAME_WEIGHT_BYTES } from './window-frames.ts';
import type { Runtime } from '../runtime/runtime.ts';

/** Limits and settings the peer announced in the handshake. */
export interface PeerLimits {
  maxFrame: number; maxTensor: number; inline: number;
  /** receives @cuda tensors into GPU memory */ gpu: boolean;
  /** stages what it receives into GPU memory through host memory (its UCX cannot map CUDA) */ stages?: boolean;
  /** reads SENT frames and sends one after each tag transfer it makes (docs/wire.md) */ reports?: boolean;
  /** reads REPORTS frames too (with `reports`) */ batchedReports?: boolean;
  /** reads gathered tag transfers (mover `g`, docs/wire.md) */ gathers?: boolean;
}

/** Default time announced tensor bytes have to arrive once their receive is posted. */
export const DEFAULT_TRANSFER_TIMEOUT_MS = 30_000;

/** Largest host tensor sent inline by default (bytes); movers/choose.ts says why 4 KiB. */
export const DEFAULT_INLINE_BYTES = 4096;

/** Bytes of messages a peer may send before admission (the handshake's frames, a few keepalives). */
export const HANDSHAKE_WINDOW_BYTES = 4 * MAX_HANDSHAKE_MESSAGE_BYTES;
/** Weight a held line may take past the window's room (holdCap): the window's own frames
 *  (CREDIT, ACK, WANT: messages of their own, which it does not count), about 230 of them at
 *  FRAME_WEIGHT_BYTES and up to 128 bytes each. */
const HOLD_SLACK_BYTES = 256 * 1024;

/** A connection's message window is this many times the largest message it reads (docs/wire.md
 *  "Message window"): room for one in the UCX queue while the one before it is read. */
export const WINDOW_MESSAGES = 2;

/** Most argument tensors a server's calls on one connection may be receiving at once (four frames
 *  of the most a frame carries): each costs 1.8-5.9 KB of heap until its bytes come (docs/security.md, Open gaps), and a client
 *  that announced 16,000 a call over 140 live calls ran a server out of heap. */
export const MAX_AWAITED_TENSORS = 65_536;
/** ServerOptions.maxAwaitedTensors by default: two connections at MAX_AWAITED_TENSORS. */
export const DEFAULT_MAX_AWAITED_TENSORS = 2 * MAX_AWAITED_TENSORS;

const NOTHING = (): void => {};
/** A tag mask that matches every bit: one connection's control tag exactly. */
const FULL_TAG_MASK = (1n << 64n) - 1n;

/** A connection: frames out, frames in (via the dispatcher), liveness, exposures, close. */
export class Connection implements FrameSink {
  /** The key this side drew: the peer tags what it sends here with it (wire/tag.ts). */
  readonly key: ConnectionKey;
  /** The key the peer drew (from HELLO or AUTH); undefined until the handshake tells it. */
  peerKey: ConnectionKey | undefined;
  /** Admission is complete (READY sent or received); before it only handshake frames count. */
  admitted = false;
  peerLimits: PeerLimits = { maxFrame: Number.MAX_SAFE_INTEGER, maxTensor: Number.MAX_SAFE_INTEGER, inline: 0, gpu: false };
  /** Largest host tensor this side sends inline. */
  inlineBytes = DEFAULT_INLINE_BYTES;
  /** Announced tensor bytes that have not arrived by then close the connection (ms). */
  transferTimeoutMs = DEFAULT_TRANSFER_TIMEOUT_MS;
  /** Largest frame this side accepts on this connection (the worker's buffer may be larger). */
  frameLimit = Number.MAX_SAFE_INTEGER;
  /** Tensors of refused frames whose payloads are still being turned away (refuse.ts refuseRaw). */
  refusing = 0;
  /** Argument tensors of this connection's calls being received (server-call.ts: at most
   *  MAX_AWAITED_TENSORS). */
  awaited = 0;
  readonly exposures = new Exposures();
  readonly transfers = new IdSequence();
  /** The peer's reports of the tag transfers it sends here (SENT frames), by transfer id. */
  readonly reports = new TransferReports(() => this.transferTimeoutMs);
  readonly liveness: Liveness;
  readonly #abort = new AbortController();
  #error: GdrpcError | undefined;
  #handler: FrameHandler | undefined;
  /** Tensor payloads: held, watched, arriving (payloads.ts). */
  readonly payloads: Payloads;

  constructor(readonly runtime: Runtime, readonly endpoint: Endpoint, livenessMs: number) {
    // Every receive tied to the connection listens to this signal: many at once is normal.
    setMaxListeners(0, this.#abort.signal);
    this.key = runtime.dispatcher.register(this);
    // Fixed here, as the window's limits are: a Server started later on the runtime may grow its
    // receive buffer.
    this.wholeWindow = Math.min(WINDOW_MESSAGES * runtime.dispatcher.frameBytes, MAX_WINDOW_BYTES);
    this.payloads = new Payloads(this);
    const connection = this;
    this.#window = new MessageWindow(Math.min(this.wholeWindow, OPENING_WINDOW_BYTES), this.wholeWindow, HANDSHAKE_WINDOW_BYTES, {
      get peer() { return connection.peer; },
      get admitted() { return connection.admitted; },
      // Reported as a broken message is (the server's 'error' event), but closed now, not after a
      // linger: UCX reads whatever the peer keeps sending for as long as the endpoint is open.
      refuse: (error) => {
        this.#handler?.malformed(0, 0, error);
        this.close(error);
      },
      sendWindowFrame: (kind, body) => this.#sender.windowFrame(kind, body),
      sentBytes: () => this.#outbox.creditable,
      grant: (n) => this.#outbox.grant(n),
      shortfall: () => this.#outbox.shortfall(),
      borrow: (n) => this.#outbox.borrow(n),
      get loanAckMs() { return connection.liveness.timeoutMs; },
      messageWaiting: () => this.#messageWaiting(),
    }, runtime.windowLoans);
    this.#inbound = new Inbound({
      get peer() { return connection.peer; },
      get admitted() { return connection.admitted; },
      get isOpen() { return connection.#error === undefined; },
      get frameLimit() { return connection.frameLimit; },
      get handler() { return connection.#handler; },
      exposures: this.exposures,
      reports: this.reports,
    }, this.#window);
    this.liveness = new Liveness(livenessMs, () => this.#keepalive(), (silentMs) => {
      this.close(new GdrpcError(Code.UNAVAILABLE, `peer ${this.peer} silent for ${silentMs} ms (liveness ${this.liveness.timeoutMs} ms)`));
    }, () => this.payloads.streaming() || this.#messageWaiting() || this.#window.peerWaitsForLoan);
    endpoint.on('error', (error) => this.close(new GdrpcError(Code.UNAVAILABLE, `connection to ${this.peer} failed: ${error.rawMessage}`, { cause: error, ucsStatus: error.ucsStatus })));
  }

  /** Whether a control message of this connection's peer waits unread in UCX's queue (behind other
   *  peers' backlog, Dispatcher.behind): the peer is not silent, this side is behind. Asked of
   *  this connection's own tag: a runtime-wide flag let one peer flooding within its window keep
   *  every peer's liveness off, a stopped client among them (a helper session's attack,
   *  2026-12-06). */
  #messageWaiting(): boolean {
    const { dispatcher, worker } = this.runtime;
    return dispatcher.behind && !worker.closed && worker.tagProbe(controlTag(this.key.value), FULL_TAG_MASK) !== null;
  }

  get peer(): string { return this.endpoint.peer; }
  /** Aborts when the connection closes; every wait tied to the connection listens to it. */
  get signal(): AbortSignal { return this.#abort.signal; }
  get closedError(): GdrpcError | undefined { return this.#error; }
  get isOpen(): boolean { return this.#error === undefined; }

  setHandler(handler: FrameHandler): void { this.#handler = handler; }

  /** Sends a control frame to the peer; the frames of one turn share messages (outbox.ts). */
  send<K extends FrameKind>(kind: K, call: number, body: FrameBody<K>): Promise<void> {
    return this.postThen(kind, call, body, NOTHING, NOTHING);
  }

  /** send() without a promise: `done` is told when the frame's message was sent, or why it was
   *  not (perhaps before post returns). Throws, sending nothing, where send() would reject at
   *  once (connection closed, handshake incomplete, frame over the peer's limit). */
  post<K extends FrameKind>(kind: K, call: number, body: FrameBody<K>, done: FrameDone): void {
    this.#sender.post(kind, call, body, done);
  }

  /** post() for a frame whose tensor bytes follow it: `sent` runs inside the flush that hands the
   *  frame's message to UCX (no promise hop between the frame and its bytes: one had left them
   *  10-14 µs behind on the H200 machine, the receiver waiting), and the promise resolves to what
   *  it returned (not a promise: that would be waited for). Where the frame does not leave
   *  (refused at once, or failed later), `failed` runs, then the promise rejects with why. */
  postThen<K extends FrameKind, T>(kind: K, call: number, body: FrameBody<K>, sent: () => T, failed: () => void): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const done: FrameDone = {
        sent: () => resolve(sent()),
        failed: (error) => {
          failed();
          reject(error);
        },
      };
      try {
        this.post(kind, call, body, done);
      } catch (error) {
        // Refused at once (closed, over the peer's frame limit): nothing was queued (once queued,
        // a frame's fate comes through `done` only).
        done.failed(error);
      }
    });
  }

  /** Sends a frame the peer needs soon but nobody waits for (a SENT report): it joins the next
   *  message this side sends (outbox.ts). Failures are the connection's (the peer's wait for it
   *  ends when the connection does). */
  sendSoon<K extends FrameKind>(kind: K, call: number, body: FrameBody<K>): void {
    this.#sender.sendSoon(kind, call, body);
  }

  /** Tells the peer how UCX moved a tag transfer it sent there, once its send completed: in the
   *  next message, batched with the other reports waiting (REPORTS) where the peer reads those,
   *  else as a SENT frame of its own. */
  reportSoon(call: number, transfer: number, description: string): void {
    this.#sender.reportSoon(call, transfer, description);
  }

  readonly #outbox = new Outbox({
    soon: () => this.#sender.reportsFrames(),
    overflow: (bytes, frames, oldestMs) => this.close(new GdrpcError(Code.RESOURCE_EXHAUSTED,
      `${this.peer} has left ${bytes} bytes of messages (${frames} frames) waiting for its window, the oldest for ${Math.round(oldestMs)} ms${this.room.waiting > 0 ? `, with ${this.room.waiting} calls waiting to add to them` : ''} (docs/wire.md "Message window")`)),
    stallMs: () => this.liveness.timeoutMs,
    callsWait: () => this.room.waiting > 0,
    waiting: (_held, progressed) => {
      this.#countWaiting(progressed);
      this.room.changed();
    },
    blocked: () => this.#window.blocked(),
    maxFrame: () => this.peerLimits.maxFrame,
    refusal: () => (this.#error === undefined ? undefined : unprocessed(this.#error)),
    // Nothing is queued before the handshake gave the peer's key, and a key is never taken back.
    deliver: (message) => this.#sender.now(controlTag(this.peerKey!.value), message),
  });

  /** What this connection's frames must pass, and how its messages reach UCX (sender.ts). */
  readonly #sender = new Sender(this, this.#outbox);

  /** Where calls wait before they add to what waits for the peer (room.ts): backpressure. */
  readonly room = new Room({
    free: () => this.#outbox.hasRoom(this.runtime.waiting.pressed),
    watchRuntime: (room) => { if (this.runtime.waiting.pressed) this.runtime.waiting.watch(room); },
    held: () => this.#outbox.watchBacklog(),
    holding: () => this.#countWaiting(false),
  });

  /** Tells the runtime what this connection holds for its peer: its waiting messages, and the
   *  answers of calls waiting for room to join them (nothing once closed). */
  #countWaiting(progressed: boolean): void {
    const held = this.#error === undefined ? this.#outbox.held + this.room.heldBytes : 0;
    this.runtime.waiting.set(this.#waitingHolder, held, progressed);
  }

  /** This connection in the runtime's count of what waits for peers (waiting.ts): past the
   *  runtime's limit, the connection whose peer has gone longest without taking any is closed. */
  readonly #waitingHolder: WaitingHolder = {
    relieve: (total, limit) => this.room.dropHeld(new GdrpcError(Code.RESOURCE_EXHAUSTED,
      `the server holds ${total} bytes for peers not taking them (maxWaitingBytes ${limit}), this call's answer among them: dropped, its peer having gone longest without taking 1 MiB of its messages (docs/wire.md "Message window")`,
      { details: { retryable: true, limit: 'maxWaitingBytes' } }), total - limit),
    shed: (held, total, limit, idleMs) => this.close(new GdrpcError(Code.RESOURCE_EXHAUSTED,
      `${this.peer} has gone ${Math.round(idleMs)} ms without taking 1 MiB of its messages, the longest of the connections on this runtime that hold ${total} bytes waiting for their peers (messages, and answers waiting for room; ${held} of them its own; maxWaitingBytes ${limit}; docs/wire.md "Message window")`)),
  };

  /** Sends a frame whose tag and bytes the caller built (handshake, tests of malformed input);
   *  it counts against the peer's window like the outbox's messages, unless `counted` is false
   *  (a copy of a message the peer reads one of: HELLO's). */
  sendRaw(tag: bigint, bytes: Uint8Array, counted = true): Promise<void> {
    return this.#sender.raw(tag, bytes, counted);
  }

  /** Bytes of messages this side lets the peer have on their way at once without a loan: 256 KiB
   *  (HELLO's `win`), and as much more as the runtime's maxWindowBytes had free when widen()
   *  took it, up to the whole window (AUTH's `win`, READY's). */
  get openingWindow(): number { return this.#window.size; }
  /** Bytes of messages this side lets the peer have on their way at once with a loan, for one
   *  message (docs/wire.md "Message window"): twice the receive buffer when the connection was
   *  made, announced as `wmax` in HELLO or AUTH. */
  readonly wholeWindow: number;
  /** What the opening window took of the runtime's maxWindowBytes (back at close). */
  #openingExtra = 0;
  #widened = false;

  /** Takes what the window opens with beyond 256 KiB from the runtime's maxWindowBytes, once:
   *  a client before its AUTH announces it, a server at admission, before READY announces it. Not
   *  before: a server's connections that never prove their token take none of the budget
   *  (docs/security.md item 4). Says the window. */
  widenWindow(): number {
    if (this.#widened || this.#error !== undefined) return this.openingWindow;
    this.#widened = true;
    this.#openingExtra = this.runtime.openingWindows.take(this.wholeWindow - this.openingWindow);
    this.#window.widen(this.openingWindow + this.#openingExtra);
    return this.openingWindow;
  }

  /** The peer's window, from its HELLO or AUTH (checked: window.ts windowRefusal): `win`, and
   *  `wmax` what a loan makes it for one message. This side's messages are made no larger than
   *  half of `wmax` and wait while the window is shut: the peer may hold back up to a quarter of
   *  it uncredited (docs/wire.md "Message window"), and a larger message could then wait for
   *  ever. One larger than half of `win` asks for a loan (WANT) when the peer lends. */
  openPeerWindow(win: number, wmax = win): void {
    this.peerLimits.maxFrame = Math.min(this.peerLimits.maxFrame, Math.floor(wmax / 2));
    if (wmax > win) this.#window.peerLends();
    this.#outbox.openWindow(win);
  }

  /** The server widened this side's window at admission (READY's `win`, checked by the handshake
   *  against HELLO's `win` and `wmax`): waiting messages may go. */
  widenPeerWindow(win: number): void {
    this.#outbox.widenWindow(win);
  }

  /** Both halves of the message window (window.ts). */
  readonly #window: MessageWindow;
  /** What reads the peer's messages (inbound.ts). */
  readonly #inbound: Inbound;

  /** Tag of tensor bytes this side sends on this connection. */
  outgoingDataTag(transfer: number): bigint {
    if (this.peerKey === undefined) throw new GdrpcError(Code.FAILED_PRECONDITION, 'handshake incomplete');
    return dataTag(this.peerKey, transfer);
  }
  /** Tag of tensor bytes this side receives on this connection. */
  incomingDataTag(transfer: number): bigint { return dataTag(this.key, transfer); }

  onStalled(): void {
    this.close(new GdrpcError(Code.UNAVAILABLE, `a control message from ${this.peer} did not arrive whole within ${this.receiveStallMs()} ms: the connection is closed rather than read past it`));
  }

  /** How long a message of this connection's may take to arrive whole while others wait: its
   *  liveness time once admitted; STALLED_RECEIVE_MS before (a peer that has proved nothing
   *  waits no longer than before the sweep held lines aside: a helper session's review). */
  receiveStallMs(): number { return this.admitted ? this.liveness.timeoutMs : STALLED_RECEIVE_MS; }

  holdCap(): { bytes: number; perMessage: number } {
    // Each held message weighs at least what the window charges a message of one frame (counted
    // by length alone, 200,000 empty messages were held: a helper session's review), and the
    // window's own frames, messages it does not count, get HOLD_SLACK_BYTES besides.
    return { bytes: this.#window.room() + HOLD_SLACK_BYTES, perMessage: FRAME_WEIGHT_BYTES };
  }

  onHeldOverrun(bytes: number): void {
    // Reported and closed as a window overrun is (the window's refuse).
    const error = new GdrpcError(Code.RESOURCE_EXHAUSTED, `${this.peer} sent messages past its window while a message of its own was still on its way (${bytes} bytes held, and more; docs/wire.md "Message window")`);
    this.#handler?.malformed(0, 0, error);
    this.close(error);
  }

  onStrayData(message: TakenMessage, low: number, framesWaiting: boolean): void {
    this.payloads.stray(message, low, framesWaiting);
  }

  onMessage(source: Uint8Array, length: number): void {
    this.liveness.received();
    this.#inbound.message(source, length);
  }

  onOversized(length: number): void {
    this.liveness.received();
    this.#inbound.oversized(length, this.runtime.dispatcher.frameBytes);
  }

  /** Closes the connection (idempotent): releases exposures, stops liveness, closes the endpoint
   *  (force when the peer is gone) and tells the handler. */
  close(error: GdrpcError = new GdrpcError(Code.UNAVAILABLE, 'connection closed'), options: { graceful?: boolean } = {}): void {
    if (this.#error !== undefined) return;
    // A graceful close lets frames that were waiting for company (sendSoon) leave first, on their
    // own: frames queued with send() in this turn fail as they always did.
    if (options.graceful === true) this.#outbox.flushSoon();
    this.#error = error;
    this.liveness.stop();
    this.exposures.releaseAll();
    this.reports.close();
    this.payloads.close();
    this.#outbox.close();
    this.room.close(unprocessed(error));
    this.runtime.waiting.unwatch(this.room);
    this.#window.close();
    this.runtime.openingWindows.give(this.#openingExtra);
    this.runtime.dispatcher.unregister(this.key);
    this.#abort.abort(error);
    const force = !options.graceful || this.endpoint.failed;
    this.#endpointClosed = this.endpoint.close({ force }).catch(() => { /* already failed: nothing left to release */ });
    this.#handler?.closed(error);
  }

  #endpointClosed: Promise<void> | undefined;
  /** Settles when UCX has closed the endpoint (a graceful close first flushes what was sent). */
  get endpointClosed(): Promise<void> { return this.#endpointClosed ?? Promise.resolve(); }

  #keepalive(): void {
    if (this.peerKey === undefined) return;
    this.send(FrameKind.Keepalive, 0, {}).catch(() => { /* the liveness timer or error event reports it */ });
  }
}
