// How a client call speaks on its connection beyond sending its REQUEST: the policy the REQUEST
// carries, CANCEL, whether a failed call certainly never reached the server (and may be retried),
// the error for a frame out of place, and a finished call's info.
import { Code, GdrpcError } from '../../errors.ts';
import { FrameKind, type FrameBody } from '../../wire/frames.ts';
import type { CallOptions } from '../call/options.ts';
import type { TransferInfo } from '../movers/mover.ts';
import type { CallInfo } from '../movers/call-info.ts';
import type { ClientSession } from './client-session.ts';
import type { PostedFrame } from '../connection/posted-frame.ts';

type RequestBody = FrameBody<FrameKind.Request>;

/** A frame handed to the connection: its transfers, and the frame's own send. */
export interface Sent { transfers: TransferInfo[]; frame: Promise<void> | PostedFrame }

/** Whether a failed call certainly never reached the server: the error says so, or the
 *  connection was lost and its REQUEST never left (its send was refused, not attempted). */
export async function neverSent(error: unknown, sent: Sent | undefined): Promise<boolean> {
  if (!(error instanceof GdrpcError)) return false;
  if (error.details?.unprocessed === true) return true;
  if (error.code !== Code.UNAVAILABLE || sent === undefined) return false;
  const failure = sent.frame instanceof Promise ? await sent.frame.then(() => undefined, (sendError: unknown) => sendError) : await sent.frame.failure();
  return failure instanceof GdrpcError && failure.details?.unprocessed === true;
}

/** Stops tracking a call, gives back what it exposed, and tells the server (CANCEL). */
export function cancel(session: ClientSession, id: number, reason?: unknown): void {
  // CANCEL first: forgetting the last call of a draining connection closes it.
  const code = reason instanceof GdrpcError && reason.code === Code.DEADLINE_EXCEEDED ? Code.DEADLINE_EXCEEDED : Code.CANCELLED;
  if (session.connection.isOpen) session.connection.send(FrameKind.Cancel, id, { code }).catch(() => {});
  session.forget(id);
  session.connection.exposures.releaseCall(id);
}

/** The caller's transfer choices travel in the REQUEST (`mv`, `ns`) so that results honour them too. */
export function putPolicy(frame: RequestBody, options: CallOptions): void {
  if (options.mover !== undefined && options.mover !== 'auto') frame.mv = options.mover;
  if (options.noStaging === true) frame.ns = true;
}

/** A finished call's info: the transfers of its arguments and results, and how long it took. */
export function callInfoFrom(sent: TransferInfo[], received: TransferInfo[], started: number): CallInfo {
  return { transfers: [...sent, ...received], durationMs: performance.now() - started };
}

/** INTERNAL for a frame the server should not have sent. */
export function protocolError(session: ClientSession, what: string): GdrpcError {
  return new GdrpcError(Code.INTERNAL, `protocol error from ${session.connection.peer}: ${what}`);
}
