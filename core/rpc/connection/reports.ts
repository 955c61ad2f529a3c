// Sender reports of tag transfers (SENT frames): a tag receiver cannot ask UCX how its bytes came
// (a receive describes only its length and memory type), so the sender, once its send completed,
// sends UCX's description of it. This side keeps one entry per tag transfer it was announced,
// from the frame's decoding until the report is taken or the transfer forgotten; a wait for a
// report lasts at most waitMs. A report that comes before its frame was decoded (a client reads a
// RESPONSE a few microtasks after the message that carried it) is kept a while among a bounded
// few. Nothing a peer sends makes this side keep more than those bounds.
// A peer that announced `rpt` sends them in REPORTS frames instead: many transfers a frame, each
// description once per connection and after that an index into the few this side keeps
// (docs/wire.md): with a SENT frame and a ~200-character description per transfer, 64 tag tensor
// calls in flight made 67.6-74.7k calls/s against 79.9-86.1k without reports (CPU box, scratch;
// docs/gpu.md "Transfer paths").
import { MAX_TENSORS_PER_FRAME, type FrameBody, type FrameKind } from '../../wire/frames.ts';
import { IdTable } from '../../live-list.ts';
import { BATCH_FRAMES } from './outbox.ts';

/** Entries beyond this many drop the oldest (its waiter hears "no report"): room for four frames
 *  of the most tensors a frame may carry. At 4,096, one frame of 5,000 separate tag tensors lost
 *  the reports of its first ones as it was decoded, and a noStaging call of it failed. */
export const MAX_PENDING_REPORTS = 4 * MAX_TENSORS_PER_FRAME;
/** Reports kept for transfers no decoded frame has announced yet; more drop the oldest. */
export const MAX_EARLY_REPORTS = 256;
/** Longest description kept: UCX's are about 200 characters. */
const MAX_REPORT_CHARS = 1024;
/** Descriptions a connection's REPORTS frames may name by index (0 to this, exclusive). */
export const REPORT_DESCRIPTIONS = 64;
/** Reports one REPORTS frame may carry. */
export const MAX_REPORTS_PER_FRAME = 1024;
/** Reports one control message may carry in all: what gdrpc's sender puts in one at most (its
 *  frames to a message, full). A message's frames are read in one turn of the event loop, and a
 *  message may hold 256 frames. */
export const MAX_REPORTS_PER_MESSAGE = BATCH_FRAMES * MAX_REPORTS_PER_FRAME;
/** Distinct descriptions whose reading is kept (a workload repeats a few sizes and protocols). */
const READINGS_KEPT = 64;

interface Entry {
  /** The description, once SENT brought it. */
  report?: string;
  /** Who waits for it (take), if anyone yet. */
  waiter?: (report: string | undefined) => void;
  /** While someone waits: performance.now() past which the report is no longer waited for. */
  due: number;
}

/** The first MAX_REPORT_CHARS characters of a peer's description, in a string of their own: a
 *  slice keeps the whole string it was cut from alive in V8 (and msgpackr may hand out a decoded
 *  string as a slice of a longer one). Cut by slicing alone, 256 SENT reports of 4 MiB for
 *  transfers nobody announced held 1,032 MiB of a server's heap for the 30 s early reports are
 *  kept, and 64 REPORTS definitions of 4 MiB 256 MiB per connection for its life (a helper
 *  session playing the attacker, CPU box; test/rpc/sender-reports.test.ts). */
function ownCopy(report: string): string {
  return Buffer.from(cutDescription(report), 'utf16le').toString('utf16le');
}

/** A description as either side keeps it: its first MAX_REPORT_CHARS characters. */
export function cutDescription(description: string): string {
  return description.length > MAX_REPORT_CHARS ? description.slice(0, MAX_REPORT_CHARS) : description;
}

/** The sender reports a connection expects. */
export class TransferReports {
  /** By transfer id (an IdTable, not a Map: core/live-list.ts says why). */
  readonly #entries = new IdTable<Entry>();
  /** Reports for transfers not announced (yet), with when they came. */
  readonly #early = new Map<number, { report: string; at: number }>();
  /** The descriptions the peer's REPORTS frames defined, by index. */
  #descriptions: Array<string | undefined> = [];
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  /** @param waitMs how long a report is waited for once someone waits, and how long one that came
   *  before its frame is kept. */
  constructor(private readonly waitMs: () => number) {}

  /** What `read` made of a description, for the descriptions seen last (at most READINGS_KEPT). */
  readonly #readings = new Map<string, unknown>();

  /** `read(report)`, remembered for the descriptions this connection saw last, the peer's reports
   *  and this side's own sends and gets alike: the same protocol and size come back with every
   *  call of a workload, and reading one is regex work (2-3% of a caller's CPU with 16 tensor
   *  calls in flight, read afresh each time). */
  reading<T>(report: string, read: (report: string) => T): T {
    if (this.#readings.has(report)) return this.#readings.get(report) as T;
    const value = read(report);
    if (this.#readings.size >= READINGS_KEPT) this.#readings.delete(this.#readings.keys().next().value!);
    this.#readings.set(report, value);
    return value;
  }

  /** Entries kept, announced and not (tests, leak checks). */
  get size(): number { return this.#entries.size + this.#early.size; }

  /** A frame announced tag transfer `transfer`: its report will be taken or forgotten. A transfer
   *  announced twice keeps its first entry (a second take of it hears "no report"). */
  expect(transfer: number): void {
    if (this.#closed || this.#entries.has(transfer)) return;
    if (this.#entries.size >= MAX_PENDING_REPORTS) {
      this.#settle(this.#entries.firstId()!, undefined);
    }
    const early = this.#early.get(transfer);
    this.#early.delete(transfer);
    this.#entries.set(transfer, early === undefined ? { due: Infinity } : { report: early.report, due: Infinity });
  }

  /** SENT from the peer. */
  deliver(transfer: number, report: string): void {
    if (this.#closed) return;
    this.#keep(transfer, ownCopy(report));
  }

  /** A report (this side's own copy) for `transfer`: handed to whoever waits, kept, or kept
   *  among the early ones. */
  #keep(transfer: number, kept: string): void {
    const entry = this.#entries.get(transfer);
    if (entry === undefined) {
      if (this.#early.has(transfer)) return;
      if (this.#early.size >= MAX_EARLY_REPORTS) this.#early.delete(this.#early.keys().next().value!);
      this.#early.set(transfer, { report: kept, at: performance.now() });
      this.#schedule();
      return;
    }
    if (entry.report !== undefined) return;
    if (entry.waiter !== undefined) this.#settle(transfer, kept);
    else entry.report = kept;
  }

  /** REPORTS from the peer: takes the descriptions it defines, then delivers each report. Returns
   *  why the frame is malformed (nothing of it is taken then), or undefined. */
  deliverAll(body: FrameBody<FrameKind.Reports>): string | undefined {
    const { x, d, p } = body;
    if (x.length !== d.length) return `carries ${x.length} transfer ids and ${d.length} description indexes`;
    if (x.length > MAX_REPORTS_PER_FRAME) return `carries ${x.length} reports, over ${MAX_REPORTS_PER_FRAME}`;
    let table = this.#descriptions;
    if (p !== undefined) {
      table = [...table];
      for (const key in p) {
        const index = Number(key);
        if (!Number.isInteger(index) || index < 0 || index >= REPORT_DESCRIPTIONS || String(index) !== key) {
          return `defines description '${key.slice(0, 16)}', not an index from 0 to ${REPORT_DESCRIPTIONS - 1}`;
        }
        table[index] = ownCopy(p[key]!);
      }
    }
    for (const index of d) {
      if (index >= REPORT_DESCRIPTIONS || table[index] === undefined) return `names description ${index}, which it never defined`;
    }
    if (this.#closed) return undefined;
    this.#descriptions = table;
    for (let i = 0; i < x.length; i += 1) this.#keep(x[i]!, table[d[i]!]!);
    return undefined;
  }

  /** The report of `transfer` once it is here; undefined when none will come (not expected,
   *  taken already, waited for waitMs, dropped, connection closed). The entry is gone once this
   *  settles. */
  take(transfer: number): Promise<string | undefined> {
    const entry = this.#entries.get(transfer);
    if (entry === undefined || entry.waiter !== undefined) return Promise.resolve(undefined);
    if (entry.report !== undefined) {
      this.#entries.delete(transfer);
      return Promise.resolve(entry.report);
    }
    entry.due = performance.now() + this.waitMs();
    this.#schedule();
    return new Promise((resolve) => { entry.waiter = resolve; });
  }

  /** The transfer was refused or failed: its report is not wanted. */
  forget(transfer: number): void {
    this.#settle(transfer, undefined);
  }

  /** The connection closed: nothing more will come. */
  close(): void {
    this.#closed = true;
    this.#readings.clear();
    this.#descriptions = [];
    this.#early.clear();
    clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const transfer of this.#entries.keys()) this.#settle(transfer, undefined);
  }

  #settle(transfer: number, report: string | undefined): void {
    const entry = this.#entries.get(transfer);
    if (entry === undefined) return;
    this.#entries.delete(transfer);
    entry.waiter?.(report);
  }

  #schedule(): void {
    this.#timer ??= setTimeout(() => this.#sweep(), this.waitMs() + 1).unref();
  }

  /** Ends the waits that lasted waitMs, and drops the early reports that old. */
  #sweep(): void {
    this.#timer = undefined;
    const now = performance.now();
    const waitMs = this.waitMs();
    let next = Infinity;
    for (const [transfer, entry] of this.#entries.entries()) {
      if (entry.waiter === undefined) continue;
      if (entry.due <= now) this.#settle(transfer, undefined);
      else next = Math.min(next, entry.due);
    }
    for (const [transfer, early] of [...this.#early]) {
      if (early.at + waitMs <= now) this.#early.delete(transfer);
      else next = Math.min(next, early.at + waitMs);
    }
    if (next !== Infinity) this.#timer = setTimeout(() => this.#sweep(), Math.max(1, next - now) + 1).unref();
  }
}
