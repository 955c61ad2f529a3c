// What becomes of an error a handler throws. A GdrpcError is the handler's answer: it reaches the
// caller as thrown (code, message, details). Anything else is a bug or an unexpected failure: the
// server reports it (Server 'error' event, or stderr when nobody listens), and the caller gets
// INTERNAL with a generic message, because the message of, say, a database driver's error may hold
// what no client should read (ServerOptions.exposeErrorMessages sends it anyway).
import { Code, GdrpcError } from '../../errors.ts';
import type { MethodDescriptor } from '../../schema/descriptor.ts';
import { methodName } from '../call/method-name.ts';

/** Wraps what a handler threw, so that the code around it can tell it from its own failures. */
export class HandlerFailure {
  constructor(readonly thrown: unknown) {}
}

/** Runs `handler`, marking what it throws or rejects with as the handler's (a plain result stays
 *  plain: the common synchronous handler costs no promise). */
export function runHandler<T>(handler: () => T): T {
  let result: T;
  try {
    result = handler();
  } catch (thrown) {
    throw new HandlerFailure(thrown);
  }
  return result instanceof Promise ? (result.catch((thrown: unknown) => { throw new HandlerFailure(thrown); }) as T) : result;
}

/** The call a failure belongs to, as reports name it. */
export interface FailedCall { method: MethodDescriptor; call: number; peer: string }

/** What the caller gets for `thrown`, and what the server reports (undefined: nothing, the error
 *  was the handler's deliberate answer). */
export function handlerError(thrown: unknown, call: FailedCall, exposeMessages: boolean): { reply: GdrpcError; report?: GdrpcError } {
  if (thrown instanceof GdrpcError) return { reply: thrown };
  // An abort the handler passed on (fetch(..., { signal: ctx.signal })) is the call ending, not a bug.
  if (thrown instanceof Error && thrown.name === 'AbortError') return { reply: GdrpcError.from(thrown) };
  const name = methodName(call.method);
  const message = thrown instanceof Error ? thrown.message : String(thrown);
  const report = new GdrpcError(Code.INTERNAL, `handler ${name} failed: ${message}`,
    { cause: thrown, details: { method: name, service: call.method.service, call: call.call, peer: call.peer } });
  const reply = exposeMessages
    ? new GdrpcError(Code.INTERNAL, `internal error in handler ${name}: ${message}`, { details: { method: name } })
    : new GdrpcError(Code.INTERNAL, `internal error in handler ${name} (the server logged the cause; ServerOptions.exposeErrorMessages sends it to clients)`, { details: { method: name } });
  return { reply, report };
}

/** A handler that broke its contract (results that do not match the schema, a stream handler that
 *  is not iterable): reported like a thrown Error, and the caller is told what was wrong. */
export function handlerContractError(message: string, call: FailedCall): GdrpcError {
  const name = methodName(call.method);
  return new GdrpcError(Code.INTERNAL, `handler ${name} ${message}`, { details: { method: name, service: call.method.service, call: call.call, peer: call.peer } });
}

/** The stderr entry for a report nobody listened to: what failed, where, and the stack. */
export function failureText(report: GdrpcError): string {
  const { method, call, peer } = report.details ?? {};
  const where = `call ${String(call)} from ${String(peer)}`;
  const cause = report.cause;
  if (cause instanceof Error && cause.stack !== undefined) return `gdrpc server: handler ${String(method)} failed (${where}): ${cause.stack}\n`;
  return `gdrpc server: ${report.rawMessage} (${where})\n`;
}

/** A hook given to ctx.afterSend threw: reported like a handler's failure (the call is over, the
 *  caller is told nothing). */
export function afterSendHookError(thrown: unknown, call: FailedCall): GdrpcError {
  const name = methodName(call.method);
  const message = thrown instanceof Error ? thrown.message : String(thrown);
  return new GdrpcError(Code.INTERNAL, `afterSend hook of handler ${name} threw: ${message}`,
    { cause: thrown, details: { method: name, service: call.method.service, call: call.call, peer: call.peer } });
}
