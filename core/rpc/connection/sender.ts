// How a connection's frames and messages leave it, on either side of its outbox (outbox.ts, which
// batches frames into messages and counts the peer's window). A frame is checked against the
// connection (open, the peer's key known) and the peer's frame limit before the outbox takes it:
// one that someone waits for is refused with why, one that nobody waits for is left out. The
// reports of the tag transfers this side sends gather into REPORTS frames where the peer reads
// those (report-batch.ts). Every message reaches UCX one way (now): copied into a send slot where
// one is free (send-slots.ts), the liveness timer told, and a failure marked unprocessed where
// nothing of it left.
import type { Endpoint } from '../../ucx/index.ts';
import { Code, GdrpcError } from '../../errors.ts';
import { encodeFrame } from '../../wire/codec.ts';
import { FrameKind, type FrameBody } from '../../wire/frames.ts';
import { FRAME_HEADER, packMessage, type WireFrame } from '../../wire/message.ts';
import { controlTag, type ConnectionKey } from '../../wire/tag.ts';
import type { SendSlots } from '../runtime/send-slots.ts';
import type { Outbox } from './outbox.ts';
import type { FrameDone } from './posted-frame.ts';
import { ReportBatch, reportFrames } from './report-batch.ts';
import { messageWeight, windowFrameBody, type WindowFrameBody, type WindowFrameKind } from './window-frames.ts';

/** What the sender needs of its connection. */
export interface SenderLink {
  readonly peer: string;
  /** The key the peer drew; undefined until the handshake tells it. */
  readonly peerKey: ConnectionKey | undefined;
  /** Of the peer's limits (PeerLimits): its largest frame, and whether it reads REPORTS frames. */
  readonly peerLimits: { readonly maxFrame: number; readonly batchedReports?: boolean };
  /** Why the connection closed; undefined while it is open. */
  readonly closedError: GdrpcError | undefined;
  readonly endpoint: Pick<Endpoint, 'tagSendNow'>;
  readonly liveness: { sent(): void };
  readonly runtime: { readonly sendSlots: SendSlots };
}

/** What one connection sends: frames checked on their way into its outbox, and messages handed
 *  to UCX. */
export class Sender {
  readonly #reportBatch = new ReportBatch();

  constructor(private readonly connection: SenderLink, private readonly outbox: Outbox) {}

  /** Queues a frame in the outbox (Connection.post); throws, queuing nothing, where the
   *  connection or the peer's frame limit refuses it. */
  post<K extends FrameKind>(kind: K, call: number, body: FrameBody<K>, done: FrameDone): void {
    this.outbox.post(kind, call, this.#encode(kind, body), done);
  }

  #encode<K extends FrameKind>(kind: K, body: FrameBody<K>): Uint8Array {
    if (this.connection.closedError !== undefined) throw unprocessed(this.connection.closedError);
    if (this.connection.peerKey === undefined) throw new GdrpcError(Code.FAILED_PRECONDITION, `no key for ${this.connection.peer} yet (handshake incomplete)`);
    const bytes = encodeFrame(kind, body);
    if (bytes.length + FRAME_HEADER > this.connection.peerLimits.maxFrame) {
      throw new GdrpcError(Code.RESOURCE_EXHAUSTED, `frame of ${bytes.length} bytes exceeds the peer's ${this.connection.peerLimits.maxFrame}-byte frame limit`);
    }
    return bytes;
  }

  /** A frame nobody waits for, to join the next message (Connection.sendSoon). Failures are the
   *  connection's (the peer's wait for it ends when the connection does). */
  sendSoon<K extends FrameKind>(kind: K, call: number, body: FrameBody<K>): void {
    if (this.connection.closedError !== undefined || this.connection.peerKey === undefined) return;
    const bytes = encodeFrame(kind, body);
    if (bytes.length + FRAME_HEADER > this.connection.peerLimits.maxFrame) return;
    this.outbox.sendSoon(kind, call, bytes);
  }

  /** The report of a tag transfer sent there (Connection.reportSoon): batched with the other
   *  reports waiting (REPORTS) where the peer reads those, else a SENT frame of its own. */
  reportSoon(call: number, transfer: number, description: string): void {
    if (this.connection.closedError !== undefined || this.connection.peerKey === undefined) return;
    if (this.connection.peerLimits.batchedReports !== true || !this.#reportBatch.add(transfer, description)) {
      this.sendSoon(FrameKind.Sent, call, { x: transfer, p: description });
      return;
    }
    if (this.#reportBatch.full) {
      for (const frame of this.reportsFrames()) this.outbox.sendSoon(frame.kind, frame.call, frame.body);
    } else {
      this.outbox.soonPending();
    }
  }

  /** The batched reports as REPORTS frames within the peer's frame limit (report-batch.ts). */
  reportsFrames(): WireFrame[] {
    return reportFrames(this.#reportBatch, this.connection.peerLimits.maxFrame);
  }

  /** A message whose tag and bytes the caller built (Connection.sendRaw), counted against the
   *  peer's window unless `counted` is false. */
  raw(tag: bigint, bytes: Uint8Array, counted: boolean): Promise<void> {
    if (counted) this.outbox.sentOutside(messageWeight(bytes, bytes.length));
    return this.now(tag, bytes) ?? Promise.resolve();
  }

  /** Sends a window frame (CREDIT on call 0, ACK) at once, in a message of its own, which the
   *  peer does not count against the window: with both windows shut, credit still flows. */
  windowFrame(kind: WindowFrameKind, body: WindowFrameBody): void {
    if (this.connection.closedError !== undefined || this.connection.peerKey === undefined) return;
    const message = packMessage([{ kind, call: 0, body: windowFrameBody(body) }]);
    this.now(controlTag(this.connection.peerKey.value), message)?.catch(() => { /* the connection's failure reports it */ });
  }

  /** Sends a message: undefined when UCX sent it at once (no promise made), else what settles
   *  when it was sent. */
  now(tag: bigint, bytes: Uint8Array): Promise<void> | undefined {
    this.connection.liveness.sent();
    const slot = this.connection.runtime.sendSlots.take(bytes);
    const sent = this.connection.endpoint.tagSendNow(tag, slot?.view ?? bytes);
    if (sent === undefined) {
      slot?.release();
      return undefined;
    }
    if (slot !== undefined) sent.then(slot.release, slot.release);
    return sent.catch(this.#failed);
  }

  readonly #failed = (error: unknown): never => {
    const failure = this.connection.closedError ?? GdrpcError.from(error, Code.UNAVAILABLE);
    // Refused by UCX before anything left (binding: details.unsent): the peer never saw it.
    throw error instanceof GdrpcError && error.details?.unsent === true ? unprocessed(failure) : failure;
  };
}

/** `error` marked as certainly not having reached the peer (a call failing with it never ran
 *  there and may be retried). */
export function unprocessed(error: GdrpcError): GdrpcError {
  return new GdrpcError(error.code, error.rawMessage, { cause: error, details: { ...(error.details ?? {}), unprocessed: true } });
}
