// What a handler is given with its arguments: the context of its call (CallContext) and the
// handler signatures of each kind of method.
import type { CallScope } from '../call/deadline.ts';
import { confirmTransfers } from '../movers/call-info.ts';
import type { TransferInfo } from '../movers/mover.ts';

type Row = Record<string, unknown>;

export interface CallContext {
  /** Aborts on client cancel, deadline, disconnect, shutdown. */
  signal: AbortSignal;
  /** Epoch ms. */
  deadline: number | undefined;
  metadata: Record<string, string>;
  peer: string;
  /** Runs `fn` once this call is over and its results' bytes have left (or will never leave: the
   *  call failed or was cancelled), e.g. to release a tensor the handler returned from its own pool. */
  afterSend(fn: () => void): void;
  /** The argument tensors' transfers (a client stream's: those of the items received so far). The
   *  path of a tag transfer may still be predicted: confirmedTransfers() waits for the caller's reports. */
  readonly transfers: readonly TransferInfo[];
  /** `transfers`, once each has its final path (confirmTransfers). */
  confirmedTransfers(): Promise<readonly TransferInfo[]>;
}
export type UnaryHandler = (args: any, ctx: CallContext) => Promise<Row> | Row;
export type ServerStreamHandler = (args: any, ctx: CallContext) => AsyncIterable<Row>;
export type ClientStreamHandler = (args: AsyncIterable<any>, ctx: CallContext) => Promise<Row>;
export type Handler = UnaryHandler | ServerStreamHandler | ClientStreamHandler;

/** What a handler's context reads of its call (a ServerCall). */
export interface HandlerCall {
  readonly scope: CallScope;
  readonly metadata: Record<string, string>;
  readonly connection: { readonly peer: string };
  readonly transfers: TransferInfo[];
  afterSend(fn: () => void): void;
}

/** The call behind a HandlerContext: a symbol-keyed field, not a private one, so that a Proxy
 *  of the context or an object made from it (Object.create) still reads through. */
const CALL = Symbol('gdrpc.call');

/** What a handler sees of its call (CallContext), one object per call. What most handlers never
 *  use is made on first use: the signal, and the functions (bound to the call, so that a handler
 *  may take them apart: `{ afterSend }`). The accessors live on the prototype: destructure a
 *  context, do not spread it (docs/runtime-api.md). */
export class HandlerContext implements CallContext {
  readonly deadline: number | undefined;
  readonly metadata: Record<string, string>;
  readonly peer: string;
  readonly [CALL]: HandlerCall;
  #afterSend: ((fn: () => void) => void) | undefined;
  #confirmedTransfers: (() => Promise<readonly TransferInfo[]>) | undefined;

  constructor(call: HandlerCall) {
    this[CALL] = call;
    this.deadline = call.scope.deadline;
    this.metadata = call.metadata;
    this.peer = call.connection.peer;
  }

  get signal(): AbortSignal { return this[CALL].scope.signal; }
  get transfers(): readonly TransferInfo[] { return this[CALL].transfers; }

  // Kept on the context once made; a Proxy of it or an object made from it (no private fields
  // of its own) gets a function made for it each time.
  get afterSend(): (fn: () => void) => void {
    if (!(#afterSend in this)) return afterSendOf(this[CALL]);
    return this.#afterSend ??= afterSendOf(this[CALL]);
  }

  get confirmedTransfers(): () => Promise<readonly TransferInfo[]> {
    if (!(#confirmedTransfers in this)) return confirmedTransfersOf(this[CALL]);
    return this.#confirmedTransfers ??= confirmedTransfersOf(this[CALL]);
  }
}

/** CallContext.afterSend of `call`, bound to it. */
function afterSendOf(call: HandlerCall): (fn: () => void) => void {
  return (fn) => call.afterSend(fn);
}

/** CallContext.confirmedTransfers of `call`: its transfers once the caller's reports came,
 *  raced against the call. */
function confirmedTransfersOf(call: HandlerCall): () => Promise<readonly TransferInfo[]> {
  return async () => {
    const transfers = call.transfers;
    await call.scope.race(confirmTransfers(transfers));
    return transfers;
  };
}
