// Status on the wire: GdrpcError <-> ERROR frame body. Unknown codes from a peer become INTERNAL,
// so that nothing outside core/errors.ts ever reaches a caller.
import { Code, GdrpcError, isCode } from '../../errors.ts';
import type { FrameBody, FrameKind } from '../../wire/frames.ts';

type ErrorBody = FrameBody<FrameKind.Error>;

/** The ERROR frame body for `error`. */
export function errorFrame(error: unknown): ErrorBody {
  const e = GdrpcError.from(error);
  const body: ErrorBody = { code: e.code, msg: e.rawMessage };
  if (e.details !== undefined || e.path !== undefined) body.det = { ...(e.details ?? {}), ...(e.path !== undefined ? { path: e.path } : {}) };
  return body;
}

/** What an ERROR's message keeps of a peer's (characters), and what its details may weigh (as
 *  plain.ts weighs a frame body) to be kept at all. An error is kept by whoever caught it, for
 *  as long as it likes: a hostile server's ERRORs of 4 MiB with `det` maps of tiny values kept
 *  about 385 MiB of a client's heap each (a helper session's attack, 2026-12-07). */
export const MAX_ERROR_MESSAGE_CHARS = 16 * 1024;
export const MAX_ERROR_DETAILS_WEIGHT = 256 * 1024;

/** The GdrpcError an ERROR frame body describes; `weight`: what the body decoded to (plain.ts):
 *  past MAX_ERROR_DETAILS_WEIGHT its details are left out, and a message past
 *  MAX_ERROR_MESSAGE_CHARS is cut. */
export function errorFromFrame(body: ErrorBody, peer: string, weight = 0): GdrpcError {
  const code = isCode(body.code) ? body.code : Code.INTERNAL;
  // The body's weight less its message's (a string weighs about its length): the details'.
  const detailsWeight = weight - body.msg.length;
  const details = detailsWeight > MAX_ERROR_DETAILS_WEIGHT ? { detailsDropped: `the peer's details weighed about ${detailsWeight} bytes decoded (at most ${MAX_ERROR_DETAILS_WEIGHT} are kept)` } : body.det;
  const path = typeof details?.path === 'string' ? details.path : undefined;
  // A slice of a string keeps the whole of it: the part kept is copied out.
  const message = body.msg.length > MAX_ERROR_MESSAGE_CHARS
    ? `${Buffer.from(body.msg.slice(0, MAX_ERROR_MESSAGE_CHARS), 'utf8').toString('utf8')}... (${body.msg.length - MAX_ERROR_MESSAGE_CHARS} more characters cut)`
    : body.msg;
  return new GdrpcError(code, message, { details: { ...(details ?? {}), peer }, ...(path !== undefined ? { path } : {}) });
}
