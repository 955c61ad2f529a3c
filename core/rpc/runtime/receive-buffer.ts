// Where the dispatcher's control receives land (dispatcher.ts).
/** The control receive buffer. Messages are decoded where they arrive (wire/codec.ts decodeFrame),
 *  and a crafted msgpack body can make the decoder read past its message's end and keep what it
 *  read: so past the message in it, the buffer holds zeros, never bytes of an earlier message
 *  (another peer's, docs/security.md). `used` is how far received bytes may reach. */
const fill = Uint8Array.prototype.fill;

export class ReceiveBuffer {
  /** A Buffer, declared as what it is used as: the package's declarations name no Node type. */
  readonly bytes: Uint8Array;
  #used = 0;
  constructor(size: number) { this.bytes = Buffer.alloc(size); }
  /** A message of `length` bytes arrived: clears what earlier ones left past it (nothing, unless
   *  the buffer was spoiled: each message is cleared once read). */
  received(length: number): void {
    if (this.#used > length) this.bytes.fill(0, length, this.#used);
    this.#used = length;
  }
  /** The message in it was read (its frames decoded, byte strings copied out): its bytes are
   *  cleared now, in its own delivery, which a reading turn charges to its connection. Cleared
   *  when the next message came instead, a peer's long message was cleared in, and charged to,
   *  another connection's delivery (a helper session's review). */
  read(): void {
    // The typed array's own fill: Buffer's wrapper cost more than the clearing of a small message
    // (46 against 19 ns, a review measured).
    if (this.#used > 0) fill.call(this.bytes, 0, 0, this.#used);
    this.#used = 0;
  }
  /** A receive failed (truncated): UCX may have written anywhere in the buffer. */
  spoiled(): void { this.#used = this.bytes.length; }
}
