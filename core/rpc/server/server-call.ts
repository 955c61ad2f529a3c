// One call on the server: receive the arguments (checked before anything is allocated), run the
// handler under the call's signal, send the results or the stream; what it leaves goes once the
// results' bytes have left (call-aftermath.ts). Nothing is sent for a call the client cancelled.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Code, GdrpcError } from '../../errors.ts';
import type { PoolShare } from '../../tensor/index.ts';
import { FrameKind, type FrameBody } from '../../wire/frames.ts';
import { MAX_AWAITED_TENSORS, type Connection } from '../connection/connection.ts';
import { PostedFrame } from '../connection/posted-frame.ts';
import type { CallScope } from '../call/deadline.ts';
import type { MethodDescriptor, TypeTable } from '../../schema/descriptor.ts';
import { afterSendHookError, handlerContractError, handlerError, HandlerFailure, runHandler, type FailedCall } from './handler-failure.ts';
import { methodName } from '../call/method-name.ts';
import { bindPlacement } from '../call/placement.ts';
import { errorFrame } from '../call/status.ts';
import type { OwnerDialer } from '../remote/owner-client.ts';
import { IncomingTensors, PendingTensor, type Allocate, type SendPolicy } from '../transfer/transfer.ts';
import { refuseRaw } from '../transfer/refuse.ts';
import { OutgoingTensors } from '../transfer/outgoing.ts';
import { validateFields } from '../call/validate.ts';
import { decodeFields, encodeFields, replaceDeep } from '../call/values.ts';
import { HandlerContext, type CallContext, type ClientStreamHandler, type Handler, type ServerStreamHandler, type UnaryHandler } from './handler-context.ts';
import type { TransferInfo } from '../movers/mover.ts';
import { CallArguments } from './call-arguments.ts';
import { ClientStream } from './client-stream.ts';
import { StreamCredit } from './stream-credit.ts';
import { resultWeight } from './result-weight.ts';
import { CallAftermath, type Sending } from './call-aftermath.ts';

type Row = Record<string, unknown>;

export { MAX_STREAM_BACKLOG } from './client-stream.ts';
/** A server stream gives the event loop a turn after this many items. */
export const STREAM_YIELD_ITEMS = 64;

/** A registered method and what it needs at run time. */
export interface MethodEntry {
  method: MethodDescriptor;
  handler: Handler;
  /** The method's struct and enum declarations (empty when its descriptor carries none). */
  types: TypeTable;
  /** The device a bare `@cuda` argument lands on (RegisterOptions.device; undefined: the server's). */
  receiveOn?: number;
  /** Results fields computed per call (the built-in pull answers with the handle's shape). */
  resultsOf?: (result: Row) => MethodDescriptor['results'];
}

/** What a server's allocation for a call may wait under: the call's scope (whose AbortSignal is
 *  made only if the allocation has to wait) and the connection's pool share. */
export interface AllocationWait { scope: CallScope; share: PoolShare | undefined }

/** What a call needs from its server. */
export interface CallEnvironment {
  allocate: (shape: Parameters<Allocate>[0], dtype: Parameters<Allocate>[1], placement: Parameters<Allocate>[2], wait: AllocationWait, field: string, countAs?: number) => ReturnType<Allocate>;
  /** The connection's share of the server's pools (set per session). */
  share?: PoolShare;
  maxTensor: number;
  exposureHoldMs: number;
  /** ServerOptions.exposeErrorMessages. */
  exposeErrorMessages: boolean;
  /** Reports a handler failure that was not a deliberate GdrpcError (Server 'error' event). */
  reportHandlerError(report: GdrpcError): void;
  /** How remote handles received in arguments are pulled (through the server's runtime). */
  dialOwner: OwnerDialer;
  /** Argument tensors the server's calls are receiving now, over all connections, and the most
   *  they may (ServerOptions.maxAwaitedTensors). */
  awaited: { now: number; readonly limit: number };
}

/** A call in progress on the server. */
export class ServerCall {
  /** Set when the client cancelled: nothing more is sent. */
  cancelledByPeer = false;
  /** Its argument objects' receives and what they leave (call-arguments.ts): made at the first
   *  one with tensor bytes. */
  #args: CallArguments | undefined;
  /** The handler's own promise (a unary or client-streaming handler's, or a server-streaming
   *  handler's next item being made). */
  #handler: Promise<unknown> | undefined;
  /** What it leaves once it is over (afterSend hooks, `@remote` results, arguments). */
  readonly #aftermath: CallAftermath;
  /** A client-streaming call's items. */
  readonly #clientStream: ClientStream | undefined;
  /** What a server-streaming call may send. */
  readonly #streamCredit: StreamCredit | undefined;
  /** run() has ended: later stream items are refused. */
  #over = false;

  constructor(readonly id: number, readonly connection: Connection, readonly entry: MethodEntry, readonly scope: CallScope,
    readonly metadata: Record<string, string>, private readonly env: CallEnvironment,
    /** The caller's mover and noStaging (from the REQUEST): they apply to results as to arguments. */
    private readonly policy: SendPolicy = { mover: 'auto', noStaging: false }) {
    this.#aftermath = new CallAftermath(env.exposureHoldMs, (thrown) => env.reportHandlerError(afterSendHookError(thrown, this.#failedCall())));
    if (entry.method.clientStreaming) this.#clientStream = new ClientStream({ id, connection, scope, name: methodName(entry.method) });
    else if (entry.method.serverStreaming) this.#streamCredit = new StreamCredit();
  }

  /** The argument tensors' transfers so far (CallContext.transfers): those of the receives that
   *  settled (a stream's items' within MAX_KEPT_TRANSFERS), then those running. */
  get transfers(): TransferInfo[] { return this.#args?.transfers ?? []; }

  /** Runs `fn` once this call is over, its results' bytes have left and the exposures of the
   *  tensors it returned `@remote` have ended (CallContext.afterSend). */
  afterSend(fn: () => void): void {
    this.#aftermath.afterSend(fn);
  }

  /** Runs the call to its end, then calls `ended`; never rejects (failures become ERROR frames).
   *  A unary call whose handler returns a plain object, and whose arguments and results carry
   *  no tensor bytes, makes no promise on the way (only this function's own). */
  async run(args: Row | undefined, ended: () => void): Promise<void> {
    const { method, handler } = this.entry;
    // One object per call, its methods on the prototype: a handler's context costs no closures.
    const ctx: CallContext = new HandlerContext(this);
    let sent: Sending | undefined;
    try {
      const clientStream = this.#clientStream;
      if (clientStream !== undefined) {
        const items = clientStream.items;
        const running = this.#handler = Promise.resolve(runHandler(() => (handler as ClientStreamHandler)(items, ctx)));
        const result = await this.scope.race(running);
        const entering = this.connection.room.enter(this.scope, () => resultWeight(result));
        if (entering !== undefined) await entering;
        sent = (await this.#respond(result)).moving;
      } else {
        const received = this.#receive(args ?? {});
        const values = received instanceof Promise ? await received : received;
        if (method.serverStreaming) {
          await this.#stream(runHandler(() => (handler as ServerStreamHandler)(values, ctx)));
        } else {
          const returned = runHandler(() => (handler as UnaryHandler)(values, ctx));
          if (returned instanceof Promise) this.#handler = returned;
          const settling = this.#settle(returned);
          const result = settling instanceof Promise ? await settling : settling;
          // Backpressure (room.ts): results that would join a backlog the peer has not taken
          // wait, unencoded, until there is room, counted in the runtime's maxWaitingBytes by
          // what they hold (result-weight.ts).
          const entering = this.connection.room.enter(this.scope, () => resultWeight(result));
          if (entering !== undefined) await entering;
          const responding = this.#respond(result);
          sent = (responding instanceof Promise ? await responding : responding).moving;
        }
      }
    } catch (error) {
      this.#fail(error);
    } finally {
      this.#over = true;
      this.scope.dispose();
      this.#clientStream?.items.close();
      this.#aftermath.over(sent, this.#args);
      ended();
    }
  }

  /** Once the call is over: the handler's promise where the call ended without waiting for it
   *  (cancelled, out of time, its connection gone), so that what counts running handlers
   *  (ServerOptions.maxCalls) counts it until it returns; undefined where it returned. A handler
   *  that ignores its signal kept running after its slot was given back, so a client cancelling
   *  calls as fast as it made them ran any number of them at once (found by a helper session
   *  reading the code, 2026-12-06). */
  get outliving(): Promise<unknown> | undefined {
    return this.scope.aborted ? this.#handler : undefined;
  }

  /** A STREAM_ITEM of a client-streaming call; `weight`: what its body decoded to (plain.ts). */
  item(body: FrameBody<FrameKind.StreamItem>, weight: number): void {
    // No stream, or the call is over (its arguments were released already): nothing will take
    // this item, so its bytes are refused rather than received into a block nobody frees.
    // (Nor will an aborted call's stream: its queue failed with the scope.)
    const stream = this.#clientStream;
    if (stream === undefined || this.#over || this.scope.aborted) {
      void refuseRaw({ connection: this.connection, call: this.id }, body.a);
      return;
    }
    stream.item(body, weight, (wire, what) => this.#receive(wire, what));
  }

  /** Opens the stream window the REQUEST asked for (`win`, `winb`): items (and their tensor
   *  bytes) this server may send (server streaming), or items the client sends before it waits
   *  for our CREDIT (client streaming). */
  openWindow(n: number | undefined, bytes: number | undefined): void {
    this.#clientStream?.openWindow(n);
    this.#streamCredit?.open(n, bytes);
  }

  /** CREDIT from the client: `n` more items may go, and it took items of `bytes` tensor bytes. */
  credit(n: number, bytes = 0): void {
    this.#streamCredit?.grant(n, bytes);
  }

  /** STREAM_END of a client-streaming call. */
  end(): void {
    this.#clientStream?.end();
  }

  /** Decodes, validates, then allocates and receives one argument object (synchronously when it
   *  carries no tensor bytes to wait for: the common small call skips every await). */
  #receive(wire: Row, what = ''): Row | Promise<Row> {
    const scope = { connection: this.connection, call: this.id };
    const { method, types } = this.entry;
    const name = methodName(method);
    // Stream items' paths start with "arguments[seq]." already.
    const label = what === '' ? `${name} arguments.` : `${name} `;
    const incoming = new IncomingTensors(scope, { maxTensor: this.env.maxTensor, noStaging: this.policy.noStaging }, { side: 'server', label, dialOwner: this.env.dialOwner, running: what !== '' });
    let values: Row;
    try {
      values = decodeFields(method.args, wire, types, incoming.decode, what);
      validateFields(method.args, values, types, `${label}${what}`.slice(0, -1));
      incoming.checkDecoded();
    } catch (error) {
      // Settle the announced bytes in the background: the ERROR must not wait for a sender that
      // may never send them.
      void refuseRaw(scope, wire);
      throw error;
    }
    if (!incoming.hasBytes) return values;
    const count = incoming.pending.length;
    const awaited = this.env.awaited;
    if (this.connection.awaited + count > MAX_AWAITED_TENSORS) {
      void refuseRaw(scope, wire);
      throw new GdrpcError(Code.RESOURCE_EXHAUSTED, `${name}: ${count} argument tensor(s) while this connection's calls are receiving ${this.connection.awaited} (at most ${MAX_AWAITED_TENSORS} at once); retry when calls have finished`, { details: { retryable: true, limit: 'awaitedTensors' } });
    }
    if (awaited.now + count > awaited.limit) {
      void refuseRaw(scope, wire);
      throw new GdrpcError(Code.RESOURCE_EXHAUSTED, `${name}: ${count} argument tensor(s) while the server's calls are receiving ${awaited.now} (ServerOptions.maxAwaitedTensors ${awaited.limit}); retry when calls have finished`, { details: { retryable: true, limit: 'maxAwaitedTensors' } });
    }
    this.connection.awaited += count;
    awaited.now += count;
    // Kept while its receive runs; then its tensors alone are. An argument object (a stream item)
    // without tensor bytes is not kept at all.
    const args = this.#args ??= new CallArguments();
    const wait: AllocationWait = { scope: this.scope, share: this.env.share };
    const receiving = incoming.receive((shape, dtype, placement, field, countAs) => this.env.allocate(shape, dtype, bindPlacement(placement, this.entry.receiveOn), wait, field, countAs));
    // Its failure reaches the caller through the race below; run() waits for it before releasing.
    const doneReceiving = (): void => {
      this.connection.awaited -= count;
      awaited.now -= count;
      args.received(incoming, receiving, what !== '');
    };
    receiving.then(doneReceiving, doneReceiving);
    args.receiving(incoming, receiving);
    // noStaging holds the handler until the client's reports say how UCX moved the arguments.
    const confirmed = this.policy.noStaging ? receiving.then(async (received) => { await incoming.confirm(); return received; }) : receiving;
    return this.scope.race(confirmed).then((received) => {
      replaceDeep(values, (item) => (item instanceof PendingTensor ? received.get(item) ?? item : item));
      return values;
    });
  }

  /** The handler's result, or the scope's error if the call ends first (a plain object is used
   *  as it is: no promise, no race). */
  #settle(result: Row | Promise<Row>): Row | Promise<Row> {
    // race() also takes care of a promise whose call already ended: its rejection is not unhandled.
    if (result instanceof Promise) return this.scope.race(result);
    this.scope.throwIfAborted();
    return result;
  }

  /** Sends RESPONSE. Without tensor bytes the frame is posted (no promise) and `moving` is the
   *  frame; with them, resolves once the frame is out, `moving` then being its transfers. */
  #respond(result: Row): { moving: Sending } | Promise<{ moving: Sending }> {
    this.scope.throwIfAborted();
    const out = this.#encode(FrameKind.Response, result);
    if (out.tensors.transfers.length === 0) {
      // A frame the connection refuses at once (closed, over the peer's limit) throws: the call
      // fails with it (an ERROR frame where the connection can still carry one).
      const posted = new PostedFrame();
      try {
        this.connection.post(FrameKind.Response, this.id, { r: out.encoded }, posted);
      } catch (error) {
        out.tensors.discard();
        throw error;
      }
      return { moving: posted };
    }
    return this.#postThenMove(FrameKind.Response, { r: out.encoded }, out.tensors);
  }

  /** Posts a frame whose tensors' transfers start as its message is handed to UCX
   *  (Connection.postThen); resolves to those transfers once it left. Where it does not leave, the
   *  tensors are discarded and the promise rejects with why. */
  #postThenMove<K extends FrameKind.Response | FrameKind.StreamItem>(kind: K, body: FrameBody<K>, tensors: OutgoingTensors): Promise<{ moving: Promise<void> }> {
    return this.connection.postThen(kind, this.id, body, () => ({ moving: this.#startTransfers(tensors) }), () => tensors.discard());
  }

  async #stream(items: AsyncIterable<Row>): Promise<void> {
    // Made with the call for every server-streaming method (the constructor).
    const credit = this.#streamCredit!;
    let seq = 0;
    if (typeof (items as Partial<AsyncIterable<Row>> | null)?.[Symbol.asyncIterator] !== 'function') {
      throw this.#contractBroken('must return an async iterable of result objects (write it as an async function*)');
    }
    const iterator = items[Symbol.asyncIterator]();
    const off = this.scope.onAbort(() => { void iterator.return?.(); });
    try {
      for (;;) {
        await credit.wanted(this.scope);
        // Counted past the call's end while it runs (outliving): a generator that ignores its
        // signal is still producing this item.
        const asked = runHandler(() => iterator.next());
        this.#handler = asked;
        const next = await this.scope.race(asked);
        if (next.done) break;
        const out = this.#encode(FrameKind.StreamItem, next.value);
        try {
          await credit.send(this.scope, out.tensors.bytes);
        } catch (error) {
          out.tensors.discard();
          throw error;
        }
        const { moving } = await this.#postThenMove(FrameKind.StreamItem, { seq, a: out.encoded }, out.tensors);
        seq += 1;
        // One item's bytes at a time: a slow reader slows the producer instead of filling memory.
        await this.scope.race(moving);
        // A turn of the event loop every STREAM_YIELD_ITEMS items: items that need no I/O settle
        // in microtasks, and a client that opened no window (or granted a huge CREDIT) while it
        // kept reading held this server's event loop for as long as it read.
        if (seq % STREAM_YIELD_ITEMS === 0) await nextTurn();
      }
    } finally {
      off();
    }
    this.scope.throwIfAborted();
    await this.connection.send(FrameKind.StreamEnd, this.id, { seq });
  }

  #encode(kind: FrameKind, result: Row): { encoded: Row; tensors: OutgoingTensors } {
    const name = methodName(this.entry.method);
    const fields = this.entry.resultsOf?.(result) ?? this.entry.method.results;
    try {
      validateFields(fields, result, this.entry.types, `${name} ${kind === FrameKind.Response ? 'results' : 'stream item'}`);
    } catch (error) {
      throw this.#contractBroken(`returned bad results: ${GdrpcError.from(error).rawMessage}`);
    }
    const tensors = new OutgoingTensors({ connection: this.connection, call: this.id }, this.policy, { side: 'server', label: `${name} results.` });
    try {
      const encoded = encodeFields(fields, result, this.entry.types, tensors.encode, '');
      tensors.finish();
      this.#aftermath.expose(tensors.exposed);
      return { encoded, tensors };
    } catch (error) {
      tensors.discard();
      throw error;
    }
  }

  #startTransfers(tensors: OutgoingTensors): Promise<void> {
    const moving = tensors.start();
    moving.catch(() => {});
    if (tensors.transfers.some((t) => t.mover === 'rma')) {
      // The reader may never send FIN: release after a while regardless.
      setTimeout(() => this.connection.exposures.releaseCall(this.id), this.env.exposureHoldMs).unref();
    }
    return moving;
  }

  #fail(error: unknown): void {
    let reply = error;
    if (error instanceof HandlerFailure) {
      const outcome = handlerError(error.thrown, this.#failedCall(), this.env.exposeErrorMessages);
      if (outcome.report !== undefined) this.env.reportHandlerError(outcome.report);
      reply = outcome.reply;
    }
    if (this.cancelledByPeer || !this.connection.isOpen) return;
    this.connection.send(FrameKind.Error, this.id, errorFrame(reply)).catch(() => {});
  }

  /** A handler that broke its contract: reported on the server, and the error the caller gets. */
  #contractBroken(message: string): GdrpcError {
    const error = handlerContractError(message, this.#failedCall());
    this.env.reportHandlerError(error);
    return error;
  }

  #failedCall(): FailedCall {
    return { method: this.entry.method, call: this.id, peer: this.connection.peer };
  }
}
