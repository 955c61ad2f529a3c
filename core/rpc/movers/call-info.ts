// The per-call report attached to results: which movers and paths the tensors took, and how long
// the call lasted. Kept off the enumerable fields so that results stay plain objects.
import type { TransferInfo } from './mover.ts';

/** Every unary/client-streaming result object carries its call's transfers here (non-enumerable). */
export const CALL_INFO: unique symbol = Symbol('gdrpc.callInfo');

export interface CallInfo { transfers: TransferInfo[]; durationMs: number }

/** Attaches `info` to a result object. */
export function attachCallInfo<T extends object>(result: T, info: CallInfo): T {
  Object.defineProperty(result, CALL_INFO, { value: info, enumerable: false, configurable: true });
  return result;
}

/** The transfers and duration of the call that produced `result`, if it came from a call. A tag
 *  transfer this side received may still report a predicted path: confirmedCallInfo waits for the
 *  sender's report. */
export function callInfo(result: object): CallInfo | undefined {
  return (result as { [CALL_INFO]?: CallInfo })[CALL_INFO];
}

/** Received transfers whose sender's report (SENT) is still on its way, with what settles when it
 *  came or will not come. Weakly keyed: a report nobody asks for goes with its TransferInfo. */
const reportsDue = new WeakMap<TransferInfo, Promise<void>>();

/** `info` is completed when `reported` settles (it never rejects). */
export function awaitingReport(info: TransferInfo, reported: Promise<void>): void {
  reportsDue.set(info, reported);
}

/** Resolves once every transfer in `transfers` has its final path: the sender's reports of tag
 *  transfers this side received have come, or will not (the connection closed, the peer does not
 *  report, or transferTimeoutMs passed). */
export async function confirmTransfers(transfers: readonly TransferInfo[]): Promise<void> {
  const due = transfers.map((info) => reportsDue.get(info)).filter((reported) => reported !== undefined);
  if (due.length > 0) await Promise.all(due);
}

/** callInfo(result), once every transfer's path is final (confirmTransfers): the paths of tensors
 *  this side received are then what the sender's UCX said (`source: 'sender'`) where it reported. */
export async function confirmedCallInfo(result: object): Promise<CallInfo | undefined> {
  const info = callInfo(result);
  if (info !== undefined) await confirmTransfers(info.transfers);
  return info;
}
