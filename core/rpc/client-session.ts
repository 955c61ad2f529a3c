// One client connection and the calls in flight on it: routes RESPONSE / ERROR / STREAM_* frames
// to their call, fails every call when the connection goes.
import { Code, GdrpcError } from '../errors.ts';
import { FrameKind } from '../wire/frames.ts';
import { MAX_CALL_ID } from '../wire/tag.ts';
import type { Connection } from './connection.ts';
import { errorFromFrame } from './status.ts';
import { refuseRaw } from './transfer.ts';

/** What a call in flight listens to. */
export interface CallListener {
  /** RESPONSE, STREAM_END or ERROR (as a GdrpcError) ended the call. */
  final(result: { kind: FrameKind.Response | FrameKind.StreamEnd; body: Record<string, unknown> } | GdrpcError): void;
  /** A STREAM_ITEM (server streaming). */
  item?(body: Record<string, unknown>): void;
  /** A CREDIT (client streaming): `n` more items may be sent. */
  credit?(n: number): void;
}

/** A ready connection from the client's side. */
export class ClientSession {
  readonly #calls = new Map<number, CallListener>();
  #nextCall = 1;
  /** The server said GOAWAY: no new calls here. */
  draining = false;

  constructor(readonly connection: Connection, private readonly onClosed: (error: GdrpcError) => void, onError: (error: GdrpcError) => void = () => {}) {
    connection.setHandler({
      frame: (kind, call, body) => this.#frame(kind, call, body),
      malformed: (_kind, call, error) => {
        const failure = new GdrpcError(Code.INTERNAL, `bad frame from ${connection.peer}: ${error.rawMessage}`, { cause: error });
        onError(failure);
        this.#finish(call, failure);
      },
      closed: (error) => {
        for (const call of [...this.#calls.keys()]) this.#finish(call, error);
        this.onClosed(error);
      },
    });
  }

  /** Open, not draining, and UCX has not reported its endpoint failed (an error not yet handled). */
  get usable(): boolean { return this.connection.isOpen && !this.draining && !this.connection.endpoint.failed; }
  get inFlight(): number { return this.#calls.size; }

  /** Starts tracking a new call; returns its id. */
  open(listener: CallListener): number {
    let id = this.#nextCall;
    while (this.#calls.has(id)) id = id >= MAX_CALL_ID ? 1 : id + 1;
    this.#nextCall = id >= MAX_CALL_ID ? 1 : id + 1;
    this.#calls.set(id, listener);
    return id;
  }

  /** Stops tracking a call (it ended, or was cancelled: late frames for it are dropped). */
  forget(id: number): void {
    this.#calls.delete(id);
  }

  #frame(kind: FrameKind, call: number, body: Record<string, unknown>): void {
    if (kind === FrameKind.GoAway) {
      this.draining = true;
      if (this.#calls.size === 0) this.connection.close(new GdrpcError(Code.UNAVAILABLE, 'server went away'), { graceful: true });
      return;
    }
    if (kind === FrameKind.Error && call === 0) {
      this.connection.close(errorFromFrame(body, this.connection.peer));
      return;
    }
    const listener = this.#calls.get(call);
    if (listener === undefined) {
      // A late answer to a call given up on: its tensor bytes are on their way all the same, and
      // the server holds them until they are taken (wire.md "Tag rendezvous").
      if (kind === FrameKind.Response || kind === FrameKind.StreamItem) void refuseRaw({ connection: this.connection, call }, body.r ?? body.a);
      return;
    }
    if (kind === FrameKind.StreamItem) listener.item?.(body);
    else if (kind === FrameKind.Credit) listener.credit?.(body.n as number);
    else if (kind === FrameKind.Response || kind === FrameKind.StreamEnd) this.#finish(call, { kind, body });
    else if (kind === FrameKind.Error) this.#finish(call, errorFromFrame(body, this.connection.peer));
  }

  #finish(call: number, result: Parameters<CallListener['final']>[0]): void {
    const listener = this.#calls.get(call);
    if (listener === undefined) return;
    this.#calls.delete(call);
    listener.final(result);
    if (this.draining && this.#calls.size === 0) this.connection.close(new GdrpcError(Code.UNAVAILABLE, 'server went away'), { graceful: true });
  }
}
