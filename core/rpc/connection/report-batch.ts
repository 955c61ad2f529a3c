// The sender's side of REPORTS frames (docs/wire.md): the reports of a connection's completed tag
// sends gather here until the next message leaves, and leave in it as one frame. The first
// REPORT_DESCRIPTIONS distinct descriptions get an index each, sent with the frame that first uses
// it; a description past those goes as a SENT frame of its own (ReportBatch.add says so).
import type { FrameBody, FrameKind } from '../../wire/frames.ts';
import { MAX_REPORT_CHARS, MAX_REPORTS_PER_FRAME, REPORT_DESCRIPTIONS } from './reports.ts';

export class ReportBatch {
  /** Index of each description given one, for the connection's life. */
  readonly #indexes = new Map<string, number>();
  #x: number[] = [];
  #d: number[] = [];
  /** Descriptions indexed since the last frame was taken: the next frame defines them. */
  #defined: Record<string, string> | undefined;

  /** Reports waiting for a frame. */
  get size(): number { return this.#x.length; }

  /** Whether the batch is full (take it now). */
  get full(): boolean { return this.#x.length >= MAX_REPORTS_PER_FRAME; }

  /** Adds the report of `transfer`; false, adding nothing, when its description has no index and
   *  none is left. */
  add(transfer: number, description: string): boolean {
    const text = description.length > MAX_REPORT_CHARS ? description.slice(0, MAX_REPORT_CHARS) : description;
    let index = this.#indexes.get(text);
    if (index === undefined) {
      if (this.#indexes.size >= REPORT_DESCRIPTIONS) return false;
      index = this.#indexes.size;
      this.#indexes.set(text, index);
      (this.#defined ??= {})[index] = text;
    }
    this.#x.push(transfer);
    this.#d.push(index);
    return true;
  }

  /** The descriptions indexed so far were not received (their frame was dropped): each is given
   *  an index afresh when next used, and the frame that uses it defines it again. */
  forgetDescriptions(): void {
    this.#indexes.clear();
  }

  /** The waiting reports as a REPORTS body, or undefined when none wait; the batch is then empty. */
  take(): FrameBody<FrameKind.Reports> | undefined {
    if (this.#x.length === 0) return undefined;
    const body: FrameBody<FrameKind.Reports> = { x: this.#x, d: this.#d };
    if (this.#defined !== undefined) body.p = this.#defined;
    this.#x = [];
    this.#d = [];
    this.#defined = undefined;
    return body;
  }
}
