// Whether the dispatcher's posted control receive is stuck: UCX matched it to a control message
// whose rest has not come, while other control messages wait behind it in UCX's queue. (A posted
// receive takes any control message UCX has queued, so one queued behind it means it is matched
// and waiting.) Seen from the dispatcher's drain passes: the same receive so for `passes` passes
// in a row and `ms` at least, so that time the event loop was held (no passes) does not count.
export class StallWatch {
  /** The receive being watched, since when, and for how many passes in a row. */
  #receive = 0;
  #since = 0;
  #passes = 0;

  constructor(private readonly passes: number, private readonly ms: number) {}

  /** One drain pass at `now`: `receive` is the posted receive's id (undefined: none posted), and
   *  `queued` whether a control message waits in UCX's queue. True when that receive is stuck
   *  (and the watch starts again). */
  stalled(receive: number | undefined, queued: boolean, now: number): boolean {
    if (!queued || receive === undefined) {
      this.#passes = 0;
      return false;
    }
    if (this.#receive !== receive || this.#passes === 0) {
      this.#receive = receive;
      this.#since = now;
      this.#passes = 0;
    }
    this.#passes += 1;
    if (this.#passes < this.passes || now - this.#since < this.ms) return false;
    this.#passes = 0;
    return true;
  }
}
