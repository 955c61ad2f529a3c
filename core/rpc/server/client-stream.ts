// A client-streaming call's items on the server: each STREAM_ITEM received into the handler's
// queue, the window the REQUEST opened (`win`) counted, CREDIT sent back as the handler takes
// items, and whatever nothing will take refused rather than received into memory nobody frees.
import { Code, GdrpcError } from '../../errors.ts';
import { FrameKind, type FrameBody } from '../../wire/frames.ts';
import type { Connection } from '../connection/connection.ts';
import type { CallScope } from '../call/deadline.ts';
import { ItemQueue, ReceiveWindow, UntakenWeight } from '../call/stream.ts';
import { refuseRaw } from '../transfer/refuse.ts';

type Row = Record<string, unknown>;

/** Most items of a client stream received ahead of its handler (those not yet taken): past it the
 *  call fails RESOURCE_EXHAUSTED. gdrpc clients keep within their window (64); a peer that opened
 *  none, or a huge one, would otherwise queue items without bound. */
export const MAX_STREAM_BACKLOG = 4096;

/** The call a stream belongs to. */
export interface StreamCall {
  readonly id: number;
  readonly connection: Connection;
  readonly scope: CallScope;
  /** "Service/Method", for messages. */
  readonly name: string;
}

export class ClientStream {
  /** What the handler iterates. */
  readonly items = new ItemQueue<Row>(undefined, () => this.#took());
  /** The window the REQUEST opened; none: items are limited by MAX_STREAM_BACKLOG alone. */
  #window: ReceiveWindow | undefined;
  /** The client sent STREAM_END. */
  #clientEnded = false;
  /** What the items not yet taken decoded to. */
  readonly #untaken = new UntakenWeight();

  constructor(private readonly call: StreamCall) {
    call.scope.onAbort((reason) => this.items.fail(reason));
  }

  /** The REQUEST's `win`: items the client sends before it waits for our CREDIT. */
  openWindow(n: number | undefined): void {
    if (n !== undefined) this.#window = new ReceiveWindow(n);
  }

  /** A STREAM_ITEM while the call runs: `receive` takes its argument object (its path prefixed
   *  with `what`) where the handler will read it. */
  item(body: FrameBody<FrameKind.StreamItem>, weight: number, receive: (wire: Row, what: string) => Row | Promise<Row>): void {
    const { connection, id, scope, name } = this.call;
    // The window counts every item, taken or not.
    const past = this.#window?.arrived();
    const overflow = past !== undefined ? `the client sent ${past}`
      : this.items.backlog >= MAX_STREAM_BACKLOG ? `the client sent ${MAX_STREAM_BACKLOG} stream items more than the handler has taken`
      : this.items.ended ? undefined : prefixed('the client sent ', this.#untaken.arrived(weight));
    if (overflow !== undefined) {
      void refuseRaw({ connection, call: id }, body.a);
      scope.abort(new GdrpcError(Code.RESOURCE_EXHAUSTED, `${name}: ${overflow}`, { details: { limit: 'streamWindow' } }));
      return;
    }
    // Nor will a stream that ended: items after STREAM_END, or after the handler stopped reading
    // (until 2026-12-06 they were received into the pool and held there until the handler
    // returned: 128 items of 1 MiB after STREAM_END took a server's whole pool, a helper
    // session's attack). One after STREAM_END breaks the protocol: the call fails.
    if (this.items.ended) {
      void refuseRaw({ connection, call: id }, body.a);
      if (this.#clientEnded) scope.abort(new GdrpcError(Code.INVALID_ARGUMENT, `${name}: the client sent stream item ${body.seq} after STREAM_END`));
      return;
    }
    let item: Promise<Row>;
    try {
      item = Promise.resolve(receive(body.a, `arguments[${body.seq}].`));
    } catch (error) {
      item = Promise.reject(error);
    }
    this.items.push(item);
  }

  /** STREAM_END. */
  end(): void {
    this.#clientEnded = true;
    this.items.close();
  }

  /** The handler took an item: CREDIT back every half window. */
  #took(): void {
    this.#untaken.took();
    const n = this.#window?.took() ?? 0;
    const { connection, id } = this.call;
    if (n > 0 && connection.isOpen) connection.send(FrameKind.Credit, id, { n }).catch(() => {});
  }
}

function prefixed(prefix: string, reason: string | undefined): string | undefined {
  return reason === undefined ? undefined : prefix + reason;
}
