// The receiving half of a connection's message window (docs/wire.md "Message window"). UCX reads
// every eager message a peer sends into its unexpected queue, whether or not anyone is reading:
// a peer that sends faster than this side reads (messages that are costly to decode) grows that
// queue without end (a flood of 256 KiB messages took a server to 15 GB in 20 s). How far
// behind the reader is cannot be seen from here, since the queue is UCX's. So the peer must show
// it: it may send `size` bytes of messages, plus what the credits it acknowledged gave back.
// Each credit carries an id drawn at random, which the peer can only learn by receiving the
// credit, and it echoes that id (ACK) before sending the bytes the credit gave: a peer that runs
// ahead of its credits has nothing to echo, and is found out, before any of its messages past
// the window is decoded, once the reader reaches them.
import { getRandomValues } from 'node:crypto';

/** Bytes an ACK message may run past the window: the peer sends the ACK of a credit before it has
 *  the credit's bytes (a message of one ACK frame is 9 + 8-14 bytes). */
export const ACK_SLACK_BYTES = 64;
/** Credits given and not yet acknowledged, at most: a peer that keeps reading and never
 *  acknowledges is past its window long before. */
const MAX_UNACKED = 64;
/** Random ids drawn at once (a credit is given per quarter window, megabytes apart). */
const ID_BATCH = 64;

/** A credit to send: `n` bytes, acknowledged by echoing `id`. */
export interface Credit { n: number; id: number }

export class ReceiveWindow {
  #received = 0;
  #acked = 0;
  #unread = 0;
  readonly #given: Credit[] = [];
  readonly #ids = new Uint32Array(ID_BATCH);
  #nextId = ID_BATCH;

  /** `size`: the window this side announced (HELLO's or AUTH's `win`); `before`: the bytes the
   *  peer may send before admission. */
  constructor(readonly size: number, private readonly before: number) {}

  /** Bytes received so far. */
  get received(): number { return this.#received; }
  /** Bytes the peer may have sent by now. */
  limit(admitted: boolean): number {
    return admitted ? this.size + this.#acked + ACK_SLACK_BYTES : Math.min(this.before, this.size);
  }

  /** Counts a message of `length` bytes before it is read: false when it ran past the limit. */
  arrived(length: number, admitted: boolean): boolean {
    this.#received += length;
    return this.#received <= this.limit(admitted);
  }

  /** A message of `length` bytes was read: a credit to give once a quarter of the window was. */
  read(length: number): Credit | undefined {
    this.#unread += length;
    if (this.#unread < this.size / 4) return undefined;
    const credit = { n: this.#unread, id: this.#drawId() };
    this.#unread = 0;
    this.#given.push(credit);
    return credit;
  }

  /** Whether credits went unacknowledged past MAX_UNACKED (the peer reads, never echoes). */
  get stalled(): boolean { return this.#given.length > MAX_UNACKED; }

  /** The peer echoed credit `id`: it must be the oldest not yet acknowledged. */
  ack(id: number): boolean {
    const oldest = this.#given[0];
    if (oldest === undefined || oldest.id !== id) return false;
    this.#given.shift();
    this.#acked += oldest.n;
    return true;
  }

  #drawId(): number {
    if (this.#nextId === ID_BATCH) {
      getRandomValues(this.#ids);
      this.#nextId = 0;
    }
    return this.#ids[this.#nextId++]!;
  }
}
