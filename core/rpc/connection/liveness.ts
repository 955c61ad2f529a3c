// Keepalive and dead-peer detection (docs/wire.md "Liveness"). UCX's own error callback catches a
// peer whose socket resets; a peer that hangs, or a network that drops packets silently, only
// shows as silence, hence the timer.

/** Default time without any frame from the peer after which it is declared gone. A peer that
 *  dies or whose connection breaks is detected sooner, by UCX (endpoint errors, UCX keepalive);
 *  this only catches a peer that hangs with its connection open, and must tolerate a Node event
 *  loop busy for seconds, or a process starved of CPU on a loaded machine (2 s was not enough
 *  there: examples under CPU hogs lost their connections). */
export const DEFAULT_LIVENESS_MS = 10_000;

/** Tracks traffic in both directions; calls `ping` when quiet and `dead` when the peer is silent. */
export class Liveness {
  #lastReceived = Date.now();
  #lastSent = Date.now();
  #timer: NodeJS.Timeout | undefined;
  #timeoutMs: number;
  #period = 0;
  #lastTick = 0;

  /** `excused` says whether the peer's frames may be waiting unread behind other traffic now: a
   *  transfer from it is under way and data is moving (its keepalives queue behind those bytes on
   *  the same connection), or a control message of its own waits unread behind other peers'
   *  (connection.ts #messageWaiting). */
  constructor(timeoutMs: number, private readonly ping: () => void, private readonly dead: (silentMs: number) => void,
    private readonly excused: () => boolean = () => false) {
    this.#timeoutMs = timeoutMs;
  }

  /** Starts (or restarts with a new timeout, e.g. the smaller of both sides' values). */
  start(timeoutMs = this.#timeoutMs): void {
    this.stop();
    this.#timeoutMs = timeoutMs;
    this.#lastReceived = Date.now();
    const period = Math.max(10, Math.floor(timeoutMs / 8));
    this.#period = period;
    this.#lastTick = Date.now();
    this.#timer = setInterval(() => this.#tick(), period);
    this.#timer.unref();
  }

  get timeoutMs(): number { return this.#timeoutMs; }
  received(): void { this.#lastReceived = Date.now(); }
  sent(): void { this.#lastSent = Date.now(); }

  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  #tick(): void {
    const now = Date.now();
    // A tick that comes late means this process's event loop was blocked (a long synchronous
    // handler, a GC pause): frames may be waiting unread, so the stall is not the peer's silence.
    const late = now - this.#lastTick - this.#period;
    this.#lastTick = now;
    if (late > this.#period) this.#lastReceived += late;
    // Bytes still arriving from the peer count as hearing from it (their own deadline is the
    // transfer timeout): its frames wait behind them in the transport. So does a control message
    // of its own waiting unread behind other peers'.
    // Asked every tick, so that it speaks of the last period only (a peer stopped a moment ago
    // has not been streaming since).
    const excused = this.excused();
    if (excused && now - this.#lastReceived > this.#timeoutMs / 2) this.#lastReceived = now;
    const silent = now - this.#lastReceived;
    if (silent > this.#timeoutMs) {
      this.stop();
      this.dead(silent);
      return;
    }
    if (now - this.#lastSent >= this.#timeoutMs / 4) this.ping();
  }
}
