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

/** The GdrpcError an ERROR frame body describes. */
export function errorFromFrame(body: ErrorBody, peer: string): GdrpcError {
  const code = isCode(body.code) ? body.code : Code.INTERNAL;
  const details = body.det;
  const path = typeof details?.path === 'string' ? details.path : undefined;
  return new GdrpcError(code, body.msg, { details: { ...(details ?? {}), peer }, ...(path !== undefined ? { path } : {}) });
}
