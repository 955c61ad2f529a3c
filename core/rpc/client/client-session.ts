// One client connection and the calls in flight on it: routes RESPONSE / ERROR / STREAM_* frames
// to their call, fails every call when the connection goes.
import { Code, GdrpcError } from '../../errors.ts';
import { FrameKind, type Frame, type FrameBody } from '../../wire/frames.ts';
import { MAX_CALL_ID } from '../../wire/tag.ts';
import type { Connection } from '../connection/connection.ts';
import { errorFromFrame } from '../call/status.ts';
import { refuseRaw } from '../transfer/refuse.ts';
import { IdTable } from '../../live-list.ts';

/** The frames that end a call well. */
export type FinalFrame = Extract<Frame, { kind: FrameKind.Response | FrameKind.StreamEnd }>;

/** What a call in flight listens to. */
export interface CallListener {
  /** RESPONSE, STREAM_END or ERROR (as a GdrpcError) ended the call. */
  final(result: FinalFrame | GdrpcError): void;
  /** A STREAM_ITEM (server streaming). */
  /** A STREAM_ITEM; `weight`: what its body decoded to (plain.ts). */
  item?(body: FrameBody<FrameKind.StreamItem>, weight: number): void;
  /** A CREDIT (client streaming): `n` more items may be sent. */
  credit?(n: number): void;
}

/** A ready connection from the client's side. */
export class ClientSession {
  /** Calls in flight by id (an IdTable, not a Map: core/live-list.ts says why). */
  readonly #calls = new IdTable<CallListener>();
  #nextCall = 1;
  /** The server said GOAWAY: no new calls here. */
  draining = false;

  /** `onDraining`: the server said GOAWAY (once). */
  constructor(readonly connection: Connection, private readonly onClosed: (error: GdrpcError) => void, onError: (error: GdrpcError) => void = () => {}, private readonly onDraining: () => void = () => {}) {
    connection.setHandler({
      frame: (frame) => this.#frame(frame),
      malformed: (_kind, call, error) => {
        const failure = new GdrpcError(Code.INTERNAL, `bad frame from ${connection.peer}: ${error.rawMessage}`, { cause: error });
        onError(failure);
        // One that belongs to no call (a broken message, or too many malformed frames in one)
        // leaves the connection unusable: its calls fail now instead of waiting for answers.
        if (call === 0) connection.close(failure);
        else this.#finish(call, failure);
      },
      closed: (error) => {
        for (const call of this.#calls.keys()) this.#finish(call, error);
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

  /** Stops tracking a call (it ended, or was cancelled: late frames for it are dropped). A
   *  draining connection closes with its last call, however that call ended (until 2026-12-06
   *  one whose calls were cancelled or ran into their deadlines stayed open). */
  forget(id: number): void {
    this.#calls.delete(id);
    // After this turn, once the CANCEL queued in it has left (a close now would fail it).
    if (this.draining && this.#calls.size === 0) setImmediate(() => this.#closeIfDrained());
  }

  #frame(frame: Frame): void {
    const { call } = frame;
    if (frame.kind === FrameKind.GoAway) {
      if (this.draining) return;
      this.draining = true;
      this.onDraining();
      this.#closeIfDrained();
      return;
    }
    if (frame.kind === FrameKind.Error && call === 0) {
      this.connection.close(errorFromFrame(frame.body, this.connection.peer, frame.weight));
      return;
    }
    const listener = this.#calls.get(call);
    if (listener === undefined) {
      // A late answer to a call given up on: its tensor bytes are on their way all the same, and
      // the server holds them until they are taken (wire.md "Tag rendezvous").
      if (frame.kind === FrameKind.Response) void refuseRaw({ connection: this.connection, call }, frame.body.r);
      else if (frame.kind === FrameKind.StreamItem) void refuseRaw({ connection: this.connection, call }, frame.body.a);
      return;
    }
    if (frame.kind === FrameKind.StreamItem) listener.item?.(frame.body, frame.weight ?? 0);
    else if (frame.kind === FrameKind.Credit) listener.credit?.(frame.body.n);
    else if (frame.kind === FrameKind.Response || frame.kind === FrameKind.StreamEnd) this.#finish(call, frame);
    else if (frame.kind === FrameKind.Error) this.#finish(call, errorFromFrame(frame.body, this.connection.peer, frame.weight));
  }

  #finish(call: number, result: Parameters<CallListener['final']>[0]): void {
    const listener = this.#calls.get(call);
    if (listener === undefined) return;
    this.#calls.delete(call);
    listener.final(result);
    this.#closeIfDrained();
  }

  #closeIfDrained(): void {
    if (this.draining && this.#calls.size === 0) this.connection.close(new GdrpcError(Code.UNAVAILABLE, 'server went away'), { graceful: true });
  }
}
