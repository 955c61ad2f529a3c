// The per-call report attached to results: which movers and paths the tensors took, and how long
// the call lasted. It is kept in a private field stamped onto the result, so that results stay
// plain objects: no key, enumerable or not, that reflection, spread or equality checks would see.
import type { TransferInfo } from './mover.ts';

export interface CallInfo { transfers: TransferInfo[]; durationMs: number }

/** A base class whose constructor returns the object it is given: a subclass then adds its
 *  private fields to that object (a fixed slot, about 30 ns, where Object.defineProperty of a
 *  non-enumerable symbol took 150-220 ns a call and a WeakMap 220-290 ns in a node micro-run). */
class Adopt {
  constructor(target: object) {
    return target;
  }
}

class CallInfoSlot extends Adopt {
  #info: CallInfo;
  private constructor(target: object, info: CallInfo) {
    super(target);
    this.#info = info;
  }

  static set(target: object, info: CallInfo): void {
    // A result given a second report (a pull into the same target again) keeps the latest.
    if (#info in target) (target as CallInfoSlot).#info = info;
    else new CallInfoSlot(target, info);
  }

  static get(target: object): CallInfo | undefined {
    return #info in target ? (target as CallInfoSlot).#info : undefined;
  }
}

/** Attaches `info` to a result object (or a pulled tensor). */
export function attachCallInfo<T extends object>(result: T, info: CallInfo): T {
  CallInfoSlot.set(result, info);
  return result;
}

/** The transfers and duration of the call that produced `result`, if it came from a call. A tag
 *  transfer this side received may still report a predicted path: confirmedCallInfo waits for the
 *  sender's report. */
export function callInfo(result: object): CallInfo | undefined {
  return CallInfoSlot.get(result);
}

/** A received transfer whose sender's report (SENT or REPORTS) is still on its way: what settles
 *  when it came or will not come, in a fixed slot of its TransferInfo (a WeakMap entry per
 *  transfer cost the receiving server ~0.3 µs a call with 64 tensor calls in flight, CPU box). */
class ReportDueSlot extends Adopt {
  #reported: Promise<void>;
  private constructor(target: object, reported: Promise<void>) {
    super(target);
    this.#reported = reported;
  }

  static set(info: TransferInfo, reported: Promise<void>): void {
    if (#reported in info) (info as unknown as ReportDueSlot).#reported = reported;
    else new ReportDueSlot(info, reported);
  }

  static get(info: TransferInfo): Promise<void> | undefined {
    return #reported in info ? (info as unknown as ReportDueSlot).#reported : undefined;
  }
}

/** `info` is completed when `reported` settles (it never rejects). */
export function awaitingReport(info: TransferInfo, reported: Promise<void>): void {
  ReportDueSlot.set(info, reported);
}

/** Resolves once every transfer in `transfers` has its final path: the sender's reports of tag
 *  transfers this side received have come, or will not (the connection closed, the peer does not
 *  report, or transferTimeoutMs passed). */
export async function confirmTransfers(transfers: readonly TransferInfo[]): Promise<void> {
  const due = transfers.map((info) => ReportDueSlot.get(info)).filter((reported) => reported !== undefined);
  if (due.length > 0) await Promise.all(due);
}

/** callInfo(result), once every transfer's path is final (confirmTransfers): the paths of tensors
 *  this side received are then what the sender's UCX said (`source: 'sender'`) where it reported. */
export async function confirmedCallInfo(result: object): Promise<CallInfo | undefined> {
  const info = callInfo(result);
  if (info !== undefined) await confirmTransfers(info.transfers);
  return info;
}
