// Streaming calls of a Client (client.ts): a server stream read as an async iterable, a client
// stream sent from one, each held to its window both ways (STREAM_WINDOW items, and the CREDIT
// given back as the other side takes them). They run on the client's own call plumbing: its
// connection, how a call is opened, how a frame with tensors is sent and how results come in.
import { Code, GdrpcError } from '../../errors.ts';
import { Tensor } from '../../tensor/index.ts';
import { describeValue } from '../../tensor/options.ts';
import { FrameKind, type FrameBody } from '../../wire/frames.ts';
import { attachCallInfo } from '../movers/call-info.ts';
import type { TransferInfo } from '../movers/mover.ts';
import type { MethodDescriptor } from '../../schema/descriptor.ts';
import { checkCall, isIterable } from '../call/call-checks.ts';
import { absoluteDeadline, CallScope } from '../call/deadline.ts';
import { methodName } from '../call/method-name.ts';
import type { CallOptions } from '../call/options.ts';
import { ItemQueue, ReceiveWindow, UntakenWeight } from '../call/stream.ts';
import { validateFields } from '../call/validate.ts';
import { methodTypes, replaceDeep } from '../call/values.ts';
import { refuseRaw } from '../transfer/refuse.ts';
import type { ClientSession, FinalFrame } from './client-session.ts';
import { callInfoFrom, cancel, protocolError, putPolicy, type Sent } from './call-frames.ts';
import type { HeldItems, Received } from './results.ts';

type Row = Record<string, unknown>;
type RequestBody = FrameBody<FrameKind.Request>;
/** What a client stream's wait for its source gives when the call ended first. */
const ENDED = Symbol('ended');

/** Stream items in flight before the receiving side has taken any (flow control, both ways). */
export const STREAM_WINDOW = 64;

/** What a streaming call uses of its Client: the connection, and how the client opens a call,
 *  sends a frame with its tensors and receives results (client.ts). */
export interface CallPlumbing {
  connection(): Promise<ClientSession>;
  open(session: ClientSession, scope: CallScope, onCredit?: (n: number) => void): { id: number; result: Promise<FinalFrame> };
  send(session: ClientSession, id: number, kind: FrameKind.Request | FrameKind.StreamItem, method: MethodDescriptor, values: Row, options: CallOptions,
    scope: CallScope, awaitTransfers: boolean, seq?: number, window?: number): Sent | Promise<Sent>;
  receive(session: ClientSession, id: number, method: MethodDescriptor, wire: Row, scope: CallScope, options: CallOptions, held?: HeldItems): Received | Promise<Received>;
  /** The client's maxResultBytes: what a server stream's untaken items may hold (`winb`). */
  maxResultBytes(): number;
}

/** Releases every tensor in a received item (one its caller never took). */
function releaseTensors(item: Row): void {
  replaceDeep(item, (value) => {
    if (value instanceof Tensor) value.release();
    return value;
  });
}

/** One request, a stream of responses (Client.serverStream): breaking out cancels the call. */
export async function* serverStreamCall(calls: CallPlumbing, method: MethodDescriptor, args: Row, options: CallOptions): AsyncGenerator<Row> {
  checkCall('serverStream', method, options);
  validateFields(method.args, args, methodTypes(method), `${methodName(method)} arguments`);
  const scope = new CallScope(absoluteDeadline(options.deadline), options.signal, method);
  const responses = new ResponseStream(calls, method, scope, options);
  try {
    const s = await scope.race(calls.connection());
    // Backpressure (room.ts): the request waits, unmade, while the server has not taken what
    // waits for it.
    const entering = s.connection.room.enter(scope);
    if (entering !== undefined) await entering;
    const id = responses.open(s);
    await calls.send(s, id, FrameKind.Request, method, args, options, scope, false, 0, STREAM_WINDOW);
    const byteWindow = calls.maxResultBytes();
    for await (const item of responses.queue) {
      responses.taking(item);
      yield item.values;
      responses.took(byteWindow);
    }
  } finally {
    scope.dispose();
  }
}

/** A server stream's responses on this side: each STREAM_ITEM received into the caller's queue,
 *  the window counted (STREAM_WINDOW items, and what the untaken items weigh), CREDIT sent back
 *  as the caller takes items, and the call cancelled when the server ignores the window or the
 *  caller stops early. */
class ResponseStream {
  readonly queue = new ItemQueue<Received>(() => this.#stopped());
  readonly #window = new ReceiveWindow(STREAM_WINDOW);
  /** Tensor bytes of the items received and not yet taken, held against maxResultBytes. */
  readonly #held: HeldItems = { bytes: 0 };
  /** What the items received and not yet taken decoded to. */
  readonly #untaken = new UntakenWeight();
  /** Tensor bytes of the items taken and not yet credited back. */
  #taken = 0;
  #session: ClientSession | undefined;
  #id = 0;
  #ended = false;

  constructor(private readonly calls: CallPlumbing, private readonly method: MethodDescriptor, private readonly scope: CallScope, private readonly options: CallOptions) {}

  /** Opens the call on `s`: its items and its end come here from now on. Returns its id. */
  open(s: ClientSession): number {
    this.#session = s;
    this.#id = s.open({
      item: (body, weight) => this.#arrived(s, body, weight),
      final: (result) => {
        this.#ended = true;
        if (result instanceof GdrpcError) this.queue.fail(result);
        else this.queue.close();
      },
    });
    this.scope.onAbort((reason) => {
      // A stream the server had ended (its items all here) keeps them: the caller takes them as
      // from a finished call (a review found an abort then ended the stream early, no error).
      if (this.#ended) return;
      cancel(s, this.#id, reason);
      this.#ended = true;
      // Ended from this side while it ran (the caller's signal or deadline, its client's close):
      // the items received and not taken are not handed out after it (the iterable throws at
      // once), and their tensors are released. Until 2026-12-08 a closed client's stream went on
      // yielding up to 63 of them, their tensors already released with the runtime's pools
      // (helper 57).
      for (const item of this.queue.takeRest()) item.then((received) => releaseTensors(received.values), () => {});
      this.queue.fail(reason);
    });
    return this.#id;
  }

  /** The caller is handed `item`: it no longer counts as untaken. */
  taking(item: Received): void {
    this.#held.bytes -= item.bytes;
    this.#untaken.took();
    this.#taken += item.bytes;
  }

  /** The caller came back for the next item (`byteWindow`: the client's maxResultBytes). */
  took(byteWindow: number): void {
    // Credit goes back as the caller takes items, so a slow reader slows the server down
    // instead of piling items up here: items every half window, and the tensor bytes of those
    // taken (the REQUEST's `winb`) once they come to a quarter of maxResultBytes, or nothing
    // taken is left (the server may be waiting for them).
    const n = this.#window.took();
    const b = this.#taken > 0 && (this.#taken >= byteWindow / 4 || this.queue.backlog === 0) ? this.#taken : 0;
    if ((n > 0 || b > 0) && !this.#ended) this.#session!.connection.send(FrameKind.Credit, this.#id, b > 0 ? { n, b } : { n }).catch(() => {});
    this.#taken -= b;
  }

  /** A STREAM_ITEM: received into the queue, or refused past the window or once the stream ended. */
  #arrived(s: ClientSession, body: FrameBody<FrameKind.StreamItem>, weight: number): void {
    const past = this.#window.arrived() ?? (this.#ended ? undefined : this.#untaken.arrived(weight));
    if (past !== undefined || this.#ended) {
      void refuseRaw({ connection: s.connection, call: this.#id }, body.a);
      if (this.#ended) return;
      const error = new GdrpcError(Code.RESOURCE_EXHAUSTED, `${methodName(this.method)}: ${s.connection.peer} sent ${past}`, { details: { limit: 'streamWindow' } });
      this.#ended = true;
      cancel(s, this.#id, error);
      this.queue.fail(error);
      return;
    }
    this.queue.push(Promise.resolve(this.calls.receive(s, this.#id, this.method, body.a, this.scope, this.options, this.#held)));
  }

  /** The caller stopped early (break, return or throw in its for-await). */
  #stopped(): void {
    if (!this.#ended && this.#session !== undefined) cancel(this.#session, this.#id);
    // The caller stopped early: items received and not taken, and those still on their way
    // (refused from now on), had tensors allocated for it that nobody will release.
    this.#ended = true;
    for (const item of this.queue.takeRest()) item.then((received) => releaseTensors(received.values), () => {});
  }
}

/** A stream of requests, one response (Client.clientStream). The call ends with the first of:
 *  its response, its deadline or signal, the connection's end, or a failure of the caller's own
 *  (the source throws, an item fails validation or cannot be sent). The source is asked for each
 *  item under the same race, so a source stalled in next() holds nothing past the call's end; a
 *  call that ends before its source did tells the server (CANCEL) and returns the source. Until
 *  2026-12-06 a failing source or a bad item left the server's call open for the connection's
 *  life (256 of them refused every later call of the connection: a helper session's fault hunt),
 *  and a deadline waited for a stalled source to yield. */
export async function clientStreamCall(calls: CallPlumbing, method: MethodDescriptor, args: AsyncIterable<Row> | Iterable<Row>, options: CallOptions): Promise<Row> {
  const started = performance.now();
  checkCall('clientStream', method, options);
  if (!isIterable(args)) throw new GdrpcError(Code.INVALID_ARGUMENT, `${methodName(method)}: clientStream takes an iterable or async iterable of argument objects, got ${describeValue(args)}`);
  const types = methodTypes(method);
  const scope = new CallScope(absoluteDeadline(options.deadline), options.signal, method);
  let source: AsyncIterator<Row> | undefined;
  let sourceDone = false;
  try {
    const session = await scope.race(calls.connection());
    // The server grants credit as its handler takes items: a slow handler slows this loop.
    const credit = new SendCredit();
    const final = calls.open(session, scope, (n) => credit.grant(n));
    const end = (): void => credit.end();
    void final.result.then(end, end);
    const transfers: TransferInfo[] = [];
    let seq = 0;
    try {
      await scope.race(session.connection.send(FrameKind.Request, final.id, clientStreamRequest(method, scope, options)));
      source = iterate(args);
      for (;;) {
        while (credit.exhausted) {
          await scope.race(credit.granted());
          credit.waited();
        }
        if (credit.callEnded || scope.aborted) break;
        const step = await scope.race(new Promise<IteratorResult<Row> | typeof ENDED>((resolve, reject) => {
          credit.onEnd(() => resolve(ENDED));
          nextItem(source!, method).then(resolve, (error: unknown) => { sourceDone = true; reject(error); });
        }));
        credit.waited();
        if (step === ENDED) break;
        if (step.done === true) {
          sourceDone = true;
          break;
        }
        credit.spend();
        validateFields(method.args, step.value, types, `${methodName(method)} arguments[${seq}]`);
        transfers.push(...(await calls.send(session, final.id, FrameKind.StreamItem, method, step.value, options, scope, true, seq)).transfers);
        seq += 1;
      }
      if (!credit.callEnded && !scope.aborted) await scope.race(session.connection.send(FrameKind.StreamEnd, final.id, { seq }));
    } catch (error) {
      // The server's call ends with this one (CANCEL, through the scope: calls.open).
      const failure = GdrpcError.from(error, Code.CANCELLED);
      if (!credit.callEnded) scope.abort(failure);
      throw failure;
    }
    const result = await final.result;
    if (result.kind !== FrameKind.Response) throw protocolError(session, 'expected RESPONSE');
    const received = await calls.receive(session, final.id, method, result.body.r, scope, options);
    return attachCallInfo(received.values, callInfoFrom(transfers, received.transfers, started));
  } finally {
    scope.dispose();
    // A source the call left before its end is told so (as for-await would), without waiting.
    if (source !== undefined && !sourceDone) void Promise.resolve().then(() => source!.return?.()).catch(() => {});
  }
}

/** The REQUEST that opens a client stream: its window, time left, metadata and transfer policy. */
function clientStreamRequest(method: MethodDescriptor, scope: CallScope, options: CallOptions): RequestBody {
  const frame: RequestBody = { svc: method.service, m: method.name, win: STREAM_WINDOW };
  const remaining = scope.remainingMs();
  if (remaining !== undefined) frame.to = remaining;
  if (options.metadata !== undefined) frame.md = options.metadata;
  putPolicy(frame, options);
  return frame;
}

/** What a client stream's send loop waits on: the server's credit (STREAM_WINDOW items, then
 *  its CREDITs) and the call's end. */
class SendCredit {
  #items = STREAM_WINDOW;
  #wake: (() => void) | undefined;
  #callEnded = false;
  // One waiter at a time is woken by the call's end: a reaction added to `settled` per item
  // would keep every item (and its tensors) reachable until the call ends.
  #stop: (() => void) | undefined;

  /** The call ended (its response, or its failure). */
  get callEnded(): boolean { return this.#callEnded; }
  /** No item may go until the server grants more, and the call goes on. */
  get exhausted(): boolean { return this.#items <= 0 && !this.#callEnded; }

  /** CREDIT: `n` more items may go. */
  grant(n: number): void {
    this.#items += n;
    this.#wake?.();
  }

  /** The call ended: the waiter, if any, is woken. */
  end(): void {
    this.#callEnded = true;
    this.#stop?.();
  }

  /** Resolves on the next CREDIT or the call's end. */
  granted(): Promise<void> {
    return new Promise<void>((resolve) => { this.#wake = resolve; this.#stop = resolve; });
  }

  /** `stop` ends the wait under way if the call ends first. */
  onEnd(stop: () => void): void { this.#stop = stop; }

  /** The wait is over: the call's end has nothing to wake. */
  waited(): void { this.#stop = undefined; }

  /** An item went. */
  spend(): void { this.#items -= 1; }
}

/** The caller's items as one async iterator (a sync iterable's values awaited, as for-await does). */
function iterate(args: AsyncIterable<Row> | Iterable<Row>): AsyncIterator<Row> {
  if (typeof (args as AsyncIterable<Row>)[Symbol.asyncIterator] === 'function') return (args as AsyncIterable<Row>)[Symbol.asyncIterator]();
  return (async function* (): AsyncGenerator<Row> { yield* args as Iterable<Row>; })();
}

/** The source's next item; a source that throws fails the call with its error as the cause. */
async function nextItem(source: AsyncIterator<Row>, method: MethodDescriptor): Promise<IteratorResult<Row>> {
  try {
    const result = await source.next();
    // As for-await: a hand-written iterator that forgets its result object is a TypeError.
    if (typeof result !== 'object' || result === null) throw new TypeError(`Iterator result ${String(result)} is not an object`);
    return result;
  } catch (error) {
    if (error instanceof GdrpcError) throw error;
    throw new GdrpcError(Code.CANCELLED, `${methodName(method)}: the stream of arguments failed: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
  }
}
