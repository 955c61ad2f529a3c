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

/** The transfers and duration of the call that produced `result`, if it came from a call. */
export function callInfo(result: object): CallInfo | undefined {
  return (result as { [CALL_INFO]?: CallInfo })[CALL_INFO];
}
