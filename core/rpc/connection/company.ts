// Frames the peer needs soon but nobody waits for (a SENT report, the connection's batched
// REPORTS): they wait for company, joining the next message the outbox sends, or leave on their
// own once the oldest has waited SOON_MS. With calls in flight that is the next REQUEST or
// RESPONSE: no message and no wake-up of their own.
import type { WireFrame } from '../../wire/message.ts';
import type { FrameDone } from './posted-frame.ts';

/** How long a frame sent with sendSoon waits for another to share its message. */
export const SOON_MS = 1;

/** A frame queued in the outbox, and whom to tell what became of it. */
export interface QueuedFrame extends WireFrame { done: FrameDone }

const NOBODY: FrameDone = { sent() {}, failed() {} };

export class Company {
  #frames: QueuedFrame[] = [];
  /** The link has something waiting for company (pending()): make() gives its frames. */
  #linkPending = false;
  #timer: NodeJS.Timeout | undefined;
  /** When the oldest frame now waiting for company began to. */
  #since = 0;

  /** `due`: the oldest has waited SOON_MS (the outbox sends them, unless a message of its own is
   *  about to take them); `make`: the frames of what the link has waiting. */
  constructor(private readonly due: () => void, private readonly make: () => WireFrame[]) {}

  /** Frames waiting, the link's counted as one. */
  get count(): number { return this.#frames.length + (this.#linkPending ? 1 : 0); }

  /** A frame waits for company. */
  add(kind: number, call: number, body: Uint8Array): void {
    this.#waitFor();
    this.#frames.push({ kind, call, body, done: NOBODY });
  }

  /** The link has something waiting for company: make() gives its frames when a message takes
   *  them. */
  pending(): void {
    if (this.#linkPending) return;
    this.#waitFor();
    this.#linkPending = true;
  }

  /** Takes the frames waiting (their timer runs out by itself: #onDue). */
  take(): QueuedFrame[] {
    let frames = this.#frames;
    if (frames.length > 0) this.#frames = [];
    if (this.#linkPending) {
      this.#linkPending = false;
      const made = this.make();
      if (made.length > 0) frames = [...frames, ...made.map((frame) => ({ ...frame, done: NOBODY }))];
    }
    return frames;
  }

  /** Drops what waits (the connection closed: nobody waits for it). */
  clear(): void {
    this.#frames = [];
    this.#linkPending = false;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #waitFor(): void {
    if (this.count === 0) this.#since = performance.now();
    this.#timer ??= setTimeout(this.#onDue, SOON_MS).unref();
  }

  /** The frames waiting leave on their own once the oldest has waited SOON_MS (at most twice
   *  that). The timer is not stopped when a message takes them (a timer set and cleared for
   *  every call's report cost about 0.4 µs a call on the CPU box): it runs out, finds nothing or
   *  younger frames, and waits again only for those. */
  readonly #onDue = (): void => {
    this.#timer = undefined;
    if (this.count === 0) return;
    const waited = performance.now() - this.#since;
    if (waited < SOON_MS) this.#timer = setTimeout(this.#onDue, Math.max(1, SOON_MS - waited)).unref();
    else this.due();
  };
}
