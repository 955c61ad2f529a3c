// Where the dispatcher's control receives land (dispatcher.ts).
/** The control receive buffer. Messages are decoded where they arrive (wire/codec.ts decodeFrame),
 *  and a crafted msgpack body can make the decoder read past its message's end and keep what it
 *  read: so past the message in it, the buffer holds zeros, never bytes of an earlier message
 *  (another peer's, docs/security.md). `used` is how far received bytes may reach. */
export class ReceiveBuffer {
  readonly bytes: Buffer;
  #used = 0;
  constructor(size: number) { this.bytes = Buffer.alloc(size); }
  /** A message of `length` bytes arrived: clears what earlier ones left past it. */
  received(length: number): void {
    if (this.#used > length) this.bytes.fill(0, length, this.#used);
    this.#used = length;
  }
  /** A receive failed (truncated): UCX may have written anywhere in the buffer. */
  spoiled(): void { this.#used = this.bytes.length; }
}
