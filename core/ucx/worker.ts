// The UCP worker: one per process, progressed from the Node event loop by the addon.
import { isIP } from 'node:net';
import { Code, GdrpcError } from '../errors.ts';
import { whenAborted } from '../abort.ts';
import { AcceptedPeers } from './accepted-peers.ts';
import { native } from '../native.ts';
import { checkObject, checkSignal, checkSize, checkU64, invalid, rejecting } from './check.ts';
import { Context } from './context.ts';
import { tagTarget, type TagBuffer } from './memory.ts';
import type { HeldLine, NativeWorker, TcpPort, WakeupKind, WorkerStats } from './native-types.ts';

export interface WorkerOptions {
  /** After a pass that found work, keep progressing for this many microseconds before sleeping
   *  on the event fd (0: never); 'adaptive' (the default) sizes the window from the gaps between
   *  passes that found work, never spins when idle, and stops spinning while the thread is being
   *  preempted (docs/binding.md "Polling after work"). */
  busyPollUs?: number | 'adaptive';
  /** Period of the watchdog timer that progresses even without an event (missed wake-ups). */
  watchdogMs?: number;
  /** While a transfer in device memory is in flight, keep progressing for up to this many
   *  microseconds after the last one began instead of sleeping on the event fd (0: never; at most
   *  10 s). Default GDRPC_DEVICE_SPIN_US from the environment, else 5000; busyPollUs 0 turns it
   *  off too (docs/binding.md "Polling while a transfer in device memory is in flight"). */
  deviceSpinUs?: number;
  /** Who may connect to this worker's TCP ports (its transports' own and its listeners'): numeric
   *  IPv4 or IPv6 addresses, each with an optional /bits. A socket filter on each listening socket
   *  drops the TCP segments of every other source, so such a peer never completes a handshake and
   *  UCX reads nothing it sends (docs/security.md "UCX's own ports"). Default: anyone. Linux. */
  allowedPeers?: readonly string[];
}
/** What UCX says about the protocol of one operation (ucp_request_query's info string), when asked
 *  for with `describe` (docs/binding.md "Protocol reports"). */
export interface ProtocolReport {
  /** The description when the operation completed: for a send, the protocol that moved the bytes
   *  as far as this side knows (a rendezvous answered with RTR switches to the data push). */
  protocol: string;
  /** The description right after the *_nbx call returned (a rendezvous: UCX's estimate). */
  initialProtocol: string;
}
export interface TagRecvResult extends Partial<ProtocolReport> { senderTag: bigint; length: number }
/** A message tagProbe took out of UCX's unexpected queue: receive it with tagRecvTaken. */
export interface TakenMessage extends TagRecvResult { taken: number }
/** Options of a tag send or receive. */
export interface TagOptions {
  /** Cancels the operation: its promise rejects with CANCELLED at once (see untilComplete). */
  signal?: AbortSignal;
  /** Settle only once UCX has completed the request, so that the buffer may be reused when the
   *  promise settles, whatever the outcome. Without it a cancel or a closing endpoint rejects at
   *  once, while UCX may still read or write the buffer (a matched rendezvous cannot be cancelled). */
  untilComplete?: boolean;
  /** Read the protocol back from UCX (ucp_request_query) and report it in the result. The
   *  operation then never completes inside the call (UCP_OP_ATTR_FLAG_NO_IMM_CMPL), which turns
   *  UCX's "eager short" into the next eager protocol for messages that would have used it. */
  describe?: boolean;
}
export type { HeldLine, TcpPort, WakeupKind, WorkerStats } from './native-types.ts';

/** What a worker closes when it closes: its endpoints and listeners. */
interface Child {
  close(options?: { force?: boolean }): unknown;
  /** A graceful close is under way (Endpoint): it waits for the peer, which may never come. */
  readonly closingGracefully?: boolean;
}

const MAX_REQUEST_ID = 0x7fffffff;  // ids above are the addon's own

/** How long closeChildren waits for endpoints whose graceful close is under way before the
 *  worker's close ends them (a server's shutdown gives them as long first). */
export const GRACEFUL_CLOSE_WAIT_MS = 2000;

/** The longest polling for device transfers, or spell on a stuck transport, a worker may be given (µs). */
const MAX_SPIN_US = 10_000_000;
/** Polling for device transfers when neither the option nor GDRPC_DEVICE_SPIN_US says (µs). */
const DEFAULT_DEVICE_SPIN_US = 5000;
/** How long a wake-up progresses in place while UCX stays BUSY with nothing to progress, when
 *  GDRPC_STUCK_SPIN_US does not say (µs; docs/binding.md). */
const DEFAULT_STUCK_SPIN_US = 200;

/** A count of µs from the environment variable `name` (0 to 10 s), else `fallback`: a typo there
 *  fails the worker with a message naming the variable, rather than leaving a bound nobody asked for. */
function spinFromEnvironment(name: 'GDRPC_DEVICE_SPIN_US' | 'GDRPC_STUCK_SPIN_US', fallback: number): number {
  const text = process.env[name];
  if (text === undefined || text.trim() === '') return fallback;
  if (!/^\d+$/.test(text.trim()) || Number(text) > MAX_SPIN_US) {
    throw new GdrpcError(Code.INVALID_ARGUMENT, `${name} must be an integer number of microseconds from 0 to ${MAX_SPIN_US}, got ${JSON.stringify(text)}`, { details: { option: name } });
  }
  return Number(text);
}

/** Most prefixes allowedPeers takes (each costs the filter a few instructions per TCP segment). */
export const MAX_PEER_PREFIXES = 256;

/** Whether `text` is a numeric IPv4 or IPv6 address with an optional /bits (at most 32 or 128). */
export function isPeerPrefix(text: unknown): boolean {
  if (typeof text !== 'string') return false;
  const [address, bits, extra] = text.split('/');
  const family = isIP(address ?? '');
  if (family === 0 || extra !== undefined) return false;
  if (bits === undefined) return true;
  return /^\d{1,3}$/.test(bits) && Number(bits) <= (family === 4 ? 32 : 128);
}

/** What an allowedPeers list must be, in the words its errors use. */
export const PEER_PREFIXES_EXPECTED = `an array of at most ${MAX_PEER_PREFIXES} numeric IPv4 or IPv6 addresses, each with an optional /bits (e.g. ["10.0.0.0/8", "127.0.0.1", "::1"])`;

/** Whether `value` is an allowedPeers list (PEER_PREFIXES_EXPECTED). */
export function isPeerPrefixList(value: unknown): value is string[] {
  return Array.isArray(value) && value.length <= MAX_PEER_PREFIXES && value.every(isPeerPrefix);
}

/** `value` as a list of peer prefixes, or INVALID_ARGUMENT naming `what`. */
export function checkPeerPrefixes(value: unknown, what: string): string[] {
  if (!isPeerPrefixList(value)) throw invalid(`${what} must be ${PEER_PREFIXES_EXPECTED}, got ${JSON.stringify(value)}`);
  return [...value];
}

/** A UCP worker driven by the Node event loop (event fd + watchdog timer). */
export class Worker {
  readonly context: Context;
  readonly #native: NativeWorker;
  readonly #children = new Set<Child>();
  readonly #acceptedPeers = new AcceptedPeers();
  /** Children whose graceful close closeChildren already waited for. */
  readonly #waitedFor = new WeakSet<Child>();
  #nextId = 1;
  #closing: Promise<void> | undefined;

  private constructor(context: Context, handle: NativeWorker) {
    this.context = context;
    this.#native = handle;
  }

  static create(context: Context, options: WorkerOptions = {}): Worker {
    checkObject(options, 'options');
    const adaptive = options.busyPollUs === undefined || options.busyPollUs === 'adaptive';
    const busyPollUs = adaptive ? -1 : checkSize(options.busyPollUs, 'options.busyPollUs');
    const watchdogMs = checkSize(options.watchdogMs ?? 100, 'options.watchdogMs');
    if (busyPollUs > 10_000_000) throw invalid('options.busyPollUs must be at most 10 s');
    if (watchdogMs > 0xffffffff) throw invalid('options.watchdogMs is too large');
    const deviceSpinUs = options.deviceSpinUs === undefined ? spinFromEnvironment('GDRPC_DEVICE_SPIN_US', DEFAULT_DEVICE_SPIN_US) : checkSize(options.deviceSpinUs, 'options.deviceSpinUs');
    if (deviceSpinUs > MAX_SPIN_US) throw invalid('options.deviceSpinUs must be at most 10 s');
    const stuckSpinUs = spinFromEnvironment('GDRPC_STUCK_SPIN_US', DEFAULT_STUCK_SPIN_US);
    const allowedPeers = options.allowedPeers === undefined ? undefined : checkPeerPrefixes(options.allowedPeers, 'options.allowedPeers');
    const nativeContext = Context.nativeOf(context);
    return new Worker(context, new (native().Worker)(nativeContext, busyPollUs, watchdogMs, deviceSpinUs, stuckSpinUs, allowedPeers));
  }

  /** Posts a tag receive into `dest`. Rejects with INVALID_ARGUMENT (message says "truncated") when the
   *  message is longer than dest, CANCELLED when cancelled by signal or close. */
  tagRecv(dest: TagBuffer, tag: bigint, mask: bigint, options: TagOptions = {}): Promise<TagRecvResult> {
    return rejecting(() => {
      this.#checkOpen();
      const { target, offset, length } = tagTarget(dest, 'dest');
      checkU64(tag, 'tag');
      checkU64(mask, 'mask');
      const { signal, untilComplete, describe } = checkTagOptions(options);
      return this.track(signal, (id, completed) => this.#native.tagRecv(target, offset, length, tag, mask, id, completed, describe), untilComplete);
    });
  }

  /** Non-blocking probe: the first unexpected message matching tag/mask (its tag and length), or
   *  null. Without `remove` the message stays queued; with it, it leaves UCX's queue and must be
   *  received with tagRecvTaken (into a 1-byte buffer to drop it). Messages the sweep holds aside
   *  (sweepHold) come first, unless `queueOnly` asks for UCX's queue alone. */
  tagProbe(tag: bigint, mask: bigint, options?: { queueOnly?: boolean }): TagRecvResult | null;
  tagProbe(tag: bigint, mask: bigint, options: { remove: true; queueOnly?: boolean }): TakenMessage | null;
  tagProbe(tag: bigint, mask: bigint, options: { remove?: boolean; queueOnly?: boolean } = {}): TagRecvResult | null {
    this.#checkOpen();
    const { remove, queueOnly } = checkObject(options, 'options');
    if (remove !== undefined && typeof remove !== 'boolean') throw invalid('options.remove must be a boolean');
    if (queueOnly !== undefined && typeof queueOnly !== 'boolean') throw invalid('options.queueOnly must be a boolean');
    return this.#native.tagProbe(checkU64(tag, 'tag'), checkU64(mask, 'mask'), remove === true, queueOnly === true);
  }

  /** Receives a message that tagProbe removed; a `dest` shorter than the message rejects with
   *  "truncated" and completes the sender (how a message is dropped). */
  tagRecvTaken(message: TakenMessage, dest: TagBuffer, options: Pick<TagOptions, 'untilComplete' | 'describe'> = {}): Promise<TagRecvResult> {
    return rejecting(() => {
      this.#checkOpen();
      checkObject(message, 'message');
      if (typeof message.taken !== 'number') throw invalid('message must come from tagProbe(..., { remove: true })');
      const { target, offset, length } = tagTarget(dest, 'dest');
      const { untilComplete, describe } = checkTagOptions(options);
      return this.track(undefined, (id, completed) => this.#native.tagRecvTaken(message.taken, target, offset, length, id, completed, describe), untilComplete);
    });
  }

  /** Runs ucp_worker_progress until idle (tests and busy loops). Returns whether anything progressed. */
  progress(): boolean {
    this.#checkOpen();
    return this.#native.progress();
  }

  /** How many wake-ups so far found UCX work to do (bytes moved, completions). Sampled over time
   *  it is a rate: data streaming in makes hundreds a second, an idle connection's UCX keepalive
   *  one (liveness tells a busy peer from a stopped one by it). */
  activity(): number {
    this.#checkOpen();
    return this.#native.activity();
  }

  stats(): WorkerStats {
    this.#checkOpen();
    return this.#native.stats();
  }

  /** The TCP ports this worker listens on, and whether allowedPeers guards each (docs/security.md
   *  "UCX's own ports"). Empty once closed. */
  ports(): TcpPort[] {
    return this.#closing === undefined ? this.#native.ports() : [];
  }

  /** Cancels all pending requests (they reject with CANCELLED), closes endpoints (force) and listeners. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      await this.closeChildren();
      this.#native.close();
    })();
    return this.#closing;
  }

  /** @internal Closes the endpoints (force) and listeners, leaving the worker open: its posted
   *  receives stay, so a caller can still take what peers sent before they were cut off
   *  (Runtime.close drains the unexpected queue so before the worker goes). An endpoint whose
   *  graceful close is under way is waited for up to GRACEFUL_CLOSE_WAIT_MS: its flush waits for
   *  the peer, and a peer whose process stopped with messages on their way never lets it finish
   *  (a server's runtime, closed after shutdown() closed such a client gracefully, waited for
   *  ever: 2026-12-07). The worker's close then ends it (its close request is cancelled, and UCX
   *  frees the endpoint, reporting the sends it never completed). Not waited for at all, an
   *  honest graceful close had UCX report its close request at the worker's destroy. */
  async closeChildren(): Promise<void> {
    const forced: unknown[] = [];
    const graceful: Child[] = [];
    for (const child of this.#children) {
      if (child.closingGracefully !== true) forced.push(child.close({ force: true }));
      // Each waited for once: Runtime.close calls this, then close() again (it waited 4 s, a
      // helper session's review found).
      else if (!this.#waitedFor.has(child)) {
        this.#waitedFor.add(child);
        graceful.push(child);
      }
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.all([
      ...forced,
      graceful.length === 0 ? undefined : Promise.race([
        Promise.allSettled(graceful.map((child) => child.close())),
        new Promise((resolve) => { timer = setTimeout(resolve, GRACEFUL_CLOSE_WAIT_MS); }),
      ]).finally(() => clearTimeout(timer)),
    ]);
  }

  get closed(): boolean {
    return this.#closing !== undefined;
  }

  /** Which wake-up build drives this worker (docs/binding.md "Two builds of the wake-up"). */
  get wakeup(): WakeupKind {
    return native().wakeup;
  }

  #checkOpen(): void {
    if (this.#closing) throw new GdrpcError(Code.FAILED_PRECONDITION, 'the worker is closed');
  }

  /** @internal A receive into `dest` that reports through `slot` and `done` instead of a promise
   *  (the dispatcher's control messages): true when a message was received inside the call,
   *  `slot` then holding its sender tag (low and high words) and length (low and high words);
   *  false while pending, `done()` once received (slot written first) or `done(error)`. A receive
   *  cancelled with cancelRequest(id), or by close, reports nothing; one UCX cancels itself (the
   *  endpoint its message came on closed) reports its error. Throws an immediate failure. */
  tagRecvInto(dest: Uint8Array, tag: bigint, mask: bigint, id: number, slot: Uint32Array, done: (error?: unknown) => void): boolean {
    this.#checkOpen();
    return this.#native.tagRecvInto(dest, 0, dest.byteLength, tag, mask, id, slot, done);
  }

  /** @internal Watches for a message matching tag/mask, taking it out of UCX's unexpected queue
   *  without receiving it, now or once one comes: true when one was taken inside the call, false
   *  while the watch waits, `taken()` once it took one. Either way `slot` (5 words) then holds its
   *  sender tag (low and high words), its length (low and high words) and its taken id, which
   *  tagRecvTakenInto receives (or tagRecvTaken, into one byte to drop it). One watch per worker,
   *  one message per watch: call again for the next (a call while a take waits to be told changes
   *  nothing, and returns false). Unlike a posted receive (tagRecvInto), which
   *  UCX matches to whatever message comes first and then cannot give up, the caller learns who
   *  sent the message before any of it is received (docs/binding.md "Watching for a message"). */
  tagWatch(tag: bigint, mask: bigint, slot: Uint32Array, taken: () => void): boolean {
    this.#checkOpen();
    return this.#native.tagWatch(tag, mask, slot, taken);
  }

  /** @internal Disarms the watch. True when it had taken a message it had not told yet: the slot
   *  holds it, it is the caller's to receive or drop, and `taken()` is not called for it. */
  tagUnwatch(): boolean {
    return this.closed ? false : this.#native.tagUnwatch();
  }

  /** @internal Turns the sweep on or off (docs/binding.md "The sweep"): after every progress
   *  pass, the oldest unexpected message of each line, control (tag bit 63 set) and payload (bit 63
   *  clear), is received into one byte, unread, while its tag is not one sweepKnown named, and the
   *  next one is looked at. A line whose oldest message is known is left for the pass after. */
  sweep(on: boolean): void {
    this.#checkOpen();
    this.#native.sweep(on);
  }

  /** @internal Names `controlTag`, and the payload tags whose high 32 bits are `dataWord` (0: none),
   *  as someone's (`known` false: no longer): the sweep leaves them. Counted: named twice, a tag
   *  stays known until forgotten twice. */
  sweepKnown(controlTag: bigint, dataWord: number, known: boolean): void {
    if (!this.closed) this.#native.sweepKnown(controlTag, dataWord, known);
  }

  /** @internal From now on the sweep takes `controlTag`'s messages out of UCX's queue when they are
   *  its oldest, into a line of their own, so that it can look past them: `capBytes` at most, each
   *  message weighing its length and `perMessage`; tagProbe, tagRecvInto and tagWatch read that
   *  line first, in order. `capBytes` 0: no more are taken (those held stay until read, or until
   *  sweepKnown forgets the tag, which drops them). */
  sweepHold(controlTag: bigint, capBytes: number, perMessage = 0): void {
    if (!this.closed) this.#native.sweepHold(controlTag, capBytes, perMessage);
  }

  /** @internal `controlTag`'s held line (sweepHold). */
  sweepHeld(controlTag: bigint): HeldLine {
    return this.closed ? { messages: 0, bytes: 0, over: false } : this.#native.sweepHeld(controlTag);
  }

  /** @internal tagRecvInto for a message tagWatch took (`taken`: its id, the slot's fifth word). */
  tagRecvTakenInto(taken: number, dest: Uint8Array, id: number, slot: Uint32Array, done: (error?: unknown) => void): boolean {
    this.#checkOpen();
    return this.#native.tagRecvTakenInto(taken, dest, 0, dest.byteLength, id, slot, done);
  }

  /** @internal Cancels the native operation `id` (a receive of tagRecvInto). */
  cancelRequest(id: number): void {
    if (!this.closed) this.#native.cancel(id);
  }

  /** @internal The id of the next native operation (what cancel() names it by). */
  requestId(): number {
    const id = this.#nextId;
    this.#nextId = id === MAX_REQUEST_ID ? 1 : id + 1;
    return id;
  }

  /** @internal Starts a native operation with a request id, wiring `signal` to cancel it. With
   *  `untilComplete` the result waits, whatever it is, for UCX to complete the request. */
  track<T>(signal: AbortSignal | undefined, start: (id: number, completed?: () => void) => Promise<T>, untilComplete = false): Promise<T> {
    if (signal?.aborted) return Promise.reject(new GdrpcError(Code.CANCELLED, 'the operation was aborted before it started'));
    const id = this.requestId();
    let promise: Promise<T>;
    if (untilComplete) {
      // The native side calls `completed` after settling, possibly much later (a cancelled
      // rendezvous ends when UCX says so); until then a failure waits. A fulfilled operation is
      // complete already: it goes on at once, without a promise of its own for the wait.
      let complete = false;
      let wake: (() => void) | undefined;
      const completed = (): void => {
        complete = true;
        wake?.();
      };
      promise = start(id, completed).catch((error: unknown) => {
        if (complete) throw error;
        return new Promise<never>((_, reject) => { wake = () => reject(error); });
      });
    } else {
      promise = start(id);
    }
    if (!signal) return promise;
    // One listener per signal, whatever the number of operations under it (core/abort.ts).
    const off = whenAborted(signal, () => this.#native.cancel(id));
    promise.then(off, off);
    return promise;
  }

  /** @internal The native worker of an open Worker (for endpoints and listeners). */
  static nativeOf(worker: unknown, name = 'worker'): NativeWorker {
    if (!(worker instanceof Worker)) throw invalid(`${name} must be a Worker`);
    worker.#checkOpen();
    return worker.#native;
  }

  /** @internal The endpoints this worker's listeners accepted, until they end (accepted-peers.ts). */
  static acceptedPeers(worker: Worker): AcceptedPeers {
    return worker.#acceptedPeers;
  }

  /** @internal Registers an endpoint or listener that closes with the worker. */
  static adopt(worker: Worker, child: Child): void {
    worker.#children.add(child);
  }

  /** @internal Forgets a child that closed. */
  static release(worker: Worker, child: Child): void {
    worker.#children.delete(child);
  }
}

export function checkTagOptions(options: TagOptions): { signal: AbortSignal | undefined; untilComplete: boolean; describe: boolean } {
  checkObject(options, 'options');
  const signal = checkSignal(options.signal, 'options.signal');
  if (options.untilComplete !== undefined && typeof options.untilComplete !== 'boolean') throw invalid('options.untilComplete must be a boolean');
  if (options.describe !== undefined && typeof options.describe !== 'boolean') throw invalid('options.describe must be a boolean');
  return { signal, untilComplete: options.untilComplete === true, describe: options.describe === true };
}
