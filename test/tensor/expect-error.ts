// Asserts that `fn` throws a GdrpcError with `code` (and a message matching `message`, if given).
import { expect } from 'vitest';
import { GdrpcError, type Code } from '../../core/errors.ts';

export function expectCode(fn: () => unknown, code: Code, message?: RegExp): GdrpcError {
  let caught: unknown;
  try {
    fn();
  } catch (error) {
    caught = error;
  }
  expect(caught, 'expected a throw').toBeInstanceOf(GdrpcError);
  const error = caught as GdrpcError;
  expect(error.code).toBe(code);
  if (message) expect(error.message).toMatch(message);
  return error;
}
