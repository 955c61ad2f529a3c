// The sender's side of REPORTS frames (docs/wire.md): the reports of a connection's completed tag
// sends gather here until the next message leaves, and leave in it as one frame. The first
// REPORT_DESCRIPTIONS distinct descriptions get an index each, sent with the frame that first uses
// it; a description past those goes as a SENT frame of its own (ReportBatch.add says so).
import { encodeFrame } from '../../wire/codec.ts';
import { FrameKind, type FrameBody } from '../../wire/frames.ts';
import { FRAME_HEADER, type WireFrame } from '../../wire/message.ts';
import { cutDescription, MAX_REPORTS_PER_FRAME, REPORT_DESCRIPTIONS } from './reports.ts';

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
    const text = cutDescription(description);
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

/** `body` in two frames of half its reports each, in order: each description it defines goes with
 *  the first half that names it (a sender defines an index in the frame that first uses it). */
export function splitReports(body: FrameBody<FrameKind.Reports>): [FrameBody<FrameKind.Reports>, FrameBody<FrameKind.Reports>] {
  const half = body.x.length >> 1;
  const first: FrameBody<FrameKind.Reports> = { x: body.x.slice(0, half), d: body.d.slice(0, half) };
  const second: FrameBody<FrameKind.Reports> = { x: body.x.slice(half), d: body.d.slice(half) };
  if (body.p !== undefined) {
    const early = new Set(first.d);
    for (const key in body.p) {
      const part = early.has(Number(key)) ? first : second;
      (part.p ??= {})[key] = body.p[key]!;
    }
  }
  return [first, second];
}

/** The reports waiting in `batch` as REPORTS frames of at most `maxFrame` bytes each (with the
 *  header): one, or as many as halving takes (splitReports). A frame of 1,024 reports and 64 new
 *  descriptions takes up to about 72 KB; a peer may take less (a server's maxFrameBytes), and a
 *  frame over its limit would be lost whole. Where even one report with the descriptions it
 *  defines does not fit, it and those after it go unreported (the peer's waits for them end after
 *  its transfer timeout) and every description is defined afresh, so that no later frame names
 *  one the peer never got. */
export function reportFrames(batch: ReportBatch, maxFrame: number): WireFrame[] {
  const body = batch.take();
  if (body === undefined) return [];
  const frames: WireFrame[] = [];
  const parts = [body];
  while (parts.length > 0) {
    const part = parts.shift()!;
    const bytes = encodeFrame(FrameKind.Reports, part);
    if (bytes.length + FRAME_HEADER <= maxFrame) {
      frames.push({ kind: FrameKind.Reports, call: 0, body: bytes });
    } else if (part.x.length > 1) {
      parts.unshift(...splitReports(part));
    } else {
      batch.forgetDescriptions();
      break;
    }
  }
  return frames;
}
