// What a call is given, checked before anything is sent: the method descriptor, that it is called
// through the API of its kind, and the call options. A mistake here used to surface as a TypeError
// from deep inside a transfer, or as a server's refusal that did not say what to do instead.
import { Code, GdrpcError } from '../../errors.ts';
import { checkOptions, describeValue } from '../../tensor/options.ts';
import type { MethodDescriptor } from '../../schema/descriptor.ts';
import { methodName } from './method-name.ts';
import { CALL_OPTIONS, type CallOptions } from './options.ts';

type Row = Record<string, unknown>;

/** Checks a call's method descriptor, that `api` is the one for its kind, and its options. */
/** The options of a call given none: known good, so not checked again on every call. */
export const NO_OPTIONS: CallOptions = Object.freeze({});

export function checkCall(api: 'unary' | 'serverStream' | 'clientStream', method: MethodDescriptor, options: CallOptions): void {
  if (typeof method !== 'object' || method === null || typeof method.service !== 'string' || typeof method.name !== 'string' || !Array.isArray(method.args)
    || (method.types !== undefined && (typeof method.types !== 'object' || method.types === null))) {
    throw new GdrpcError(Code.INVALID_ARGUMENT, `Client.${api}: expected a method descriptor (Service.methods.name), got ${describeValue(method)}`);
  }
  const kind = method.clientStreaming ? 'clientStream' : method.serverStreaming ? 'serverStream' : 'unary';
  if (kind !== api) {
    throw new GdrpcError(Code.INVALID_ARGUMENT, `${methodName(method)} is ${kind === 'unary' ? 'a unary method' : kind === 'clientStream' ? 'client-streaming' : 'server-streaming'}: call it with Client.${kind}, not Client.${api}`);
  }
  if (options !== NO_OPTIONS) checkOptions('CallOptions', options, CALL_OPTIONS);
}

/** Whether clientStream can iterate `value`. */
export function isIterable(value: unknown): value is AsyncIterable<Row> | Iterable<Row> {
  return typeof value === 'object' && value !== null
    && (typeof (value as AsyncIterable<Row>)[Symbol.asyncIterator] === 'function' || typeof (value as Iterable<Row>)[Symbol.iterator] === 'function');
}
