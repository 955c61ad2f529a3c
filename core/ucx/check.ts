// Argument checks of the binding: every public entry point validates here, so the addon can
// trust what it receives. Failures are GdrpcError INVALID_ARGUMENT naming the argument.
import { Code, GdrpcError } from '../errors.ts';

const U64_MAX = (1n << 64n) - 1n;

/** INVALID_ARGUMENT with the given message. */
export function invalid(message: string): GdrpcError {
  return new GdrpcError(Code.INVALID_ARGUMENT, message);
}

/** A byte count or offset: a safe integer >= 0. */
export function checkSize(value: unknown, name: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw invalid(`${name} must be a non-negative safe integer, got ${describe(value)}`);
  }
  return value;
}

/** A 64-bit unsigned value carried as bigint (tags, masks, addresses). */
export function checkU64(value: unknown, name: string): bigint {
  if (typeof value !== 'bigint' || value < 0n || value > U64_MAX) {
    throw invalid(`${name} must be a bigint in [0, 2^64), got ${describe(value)}`);
  }
  return value;
}

export function checkPort(value: unknown, name: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > 65535) {
    throw invalid(`${name} must be an integer port in [0, 65535], got ${describe(value)}`);
  }
  return value;
}

export function checkString(value: unknown, name: string): string {
  if (typeof value !== 'string' || value.length === 0) throw invalid(`${name} must be a non-empty string, got ${describe(value)}`);
  return value;
}

export function checkObject(value: unknown, name: string): Record<string, unknown> {
  if (value === null || typeof value !== 'object') throw invalid(`${name} must be an object, got ${describe(value)}`);
  return value as Record<string, unknown>;
}

export function checkSignal(value: unknown, name: string): AbortSignal | undefined {
  if (value === undefined) return undefined;
  if (!(value instanceof AbortSignal)) throw invalid(`${name} must be an AbortSignal, got ${describe(value)}`);
  return value;
}

/** A short description of a bad value for error messages. */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? value.slice(0, 40) + '…' : value);
  if (typeof value === 'object') return value.constructor?.name ?? 'object';
  return String(value);
}

/** Runs `body`, turning a synchronous throw into a rejected promise (operations report by rejecting). */
export function rejecting<T>(body: () => Promise<T>): Promise<T> {
  try {
    return body();
  } catch (error) {
    return Promise.reject(GdrpcError.from(error));
  }
}
