// What becomes of a control message once read: handed to its connection in the receive buffer it
// came into, or dropped where it belongs to none; a receive that failed is told to its connection
// where the failure names one. Nothing a connection does with a message (an 'error' listener that
// throws) may stop this side's receiving.
import type { TakenMessage, Worker } from '../../ucx/index.ts';
import { GdrpcError } from '../../errors.ts';
import type { ConnectionTable } from './connection-table.ts';
import type { ReceiveBuffer } from './receive-buffer.ts';

export class Delivery {
  /** Messages of no live connection (gone, never was, or a guess), dropped; payloads dropped. */
  unattributed = 0;
  droppedPayloads = 0;
  static readonly #sink = new Uint8Array(1);
  /** The binding's sweep's counts when the dispatcher stopped (the worker closes after). */
  #sweptAtStop = { sweptControl: 0, sweptData: 0 };

  constructor(private readonly worker: Worker, private readonly table: ConnectionTable) {}

  /** What was dropped, here and by the binding's sweep (Worker.sweep), which is counted in too. */
  dropped(): { unattributed: number; droppedPayloads: number; sweptControl: number; sweptData: number } {
    const { sweptControl, sweptData } = this.worker.closed ? this.#sweptAtStop : this.worker.stats();
    return { unattributed: this.unattributed + sweptControl, droppedPayloads: this.droppedPayloads + sweptData, sweptControl, sweptData };
  }

  /** The dispatcher stopped: the sweep's counts are kept as they are now. */
  stopped(): void {
    if (!this.worker.closed) this.#sweptAtStop = this.worker.stats();
  }

  /** Hands the message described by `slot` (sender tag words, length), received into `buffer`, to
   *  its connection, in place: a copy of each message, and the DataView msgpackr made for each
   *  copy, cost about 0.6 µs a message in a micro-benchmark on the CPU box (docs/binding.md). */
  deliver(buffer: ReceiveBuffer, slot: Uint32Array): void {
    const length = slot[2]!;
    buffer.received(length);
    const sink = this.table.sinkOfWords(slot[0]!, slot[1]!);
    if (sink === undefined) this.unattributed += 1;
    else this.tell(() => sink.onMessage(buffer.bytes, length));
    buffer.read();
  }

  /** A receive into `buffer` that failed (a message longer than the buffer), told to its
   *  connection if known; the buffer is marked spoiled, UCX may have written anywhere in it. */
  failed(buffer: ReceiveBuffer, error: unknown): void {
    buffer.spoiled();
    this.tell(() => this.#receiveFailed(GdrpcError.from(error)));
  }

  /** Tells a connection something: one that throws loses what it was told, not the loop. */
  tell(what: () => void): void {
    try {
      what();
    } catch {
      // The loop goes on.
    }
  }

  /** Drops a control message of no connection, taken out of UCX's queue: its bytes are not read
   *  (a rendezvous message's sender is told the receive was too short). */
  dropControl(message: TakenMessage): void {
    this.unattributed += 1;
    this.discard(message);
  }

  /** Drops a payload: received into one byte, which completes its sender with truncation. */
  dropPayload(message: TakenMessage): void {
    this.droppedPayloads += 1;
    this.discard(message);
  }

  /** Receives a taken message into one byte: UCX completes it truncated, without its bytes. */
  discard(message: TakenMessage): void {
    this.worker.tagRecvTaken(message, Delivery.#sink).catch(() => { /* truncation is the point */ });
  }

  #receiveFailed(error: GdrpcError): void {
    const tag = error.details?.senderTag;
    if (/truncat/i.test(error.rawMessage) && typeof tag === 'bigint') {
      const length = typeof error.details?.length === 'number' ? error.details.length : -1;
      const sink = this.table.sinkOf(tag);
      if (sink === undefined) this.unattributed += 1;
      else sink.onOversized(length);
    }
    // Without the tag there is no one to tell; the message is lost and the loop goes on.
  }
}
