// Checks of the options objects the public API takes, one rule per option in a table. A bad value
// is INVALID_ARGUMENT naming `Owner.option`, the value and what is allowed, raised where the options
// are given: left for later, it surfaced as a TypeError deep in a transfer, or as a timer that fired
// at once (Node runs a setTimeout of NaN or of more than 2^31 ms after 1 ms). Here, in the lowest
// layer of the runtime API, so that tensor and RPC options read alike (core/rpc/call/options.ts).
import { Code, GdrpcError } from '../errors.ts';

/** What one option accepts: the test, and the words that say it in an error. */
export interface OptionRule { readonly expected: string; accepts(value: unknown): boolean }

/** The rules of an options type, one per option (the compiler insists on every one). */
export type OptionRules<T> = { readonly [K in Exclude<keyof T, symbol>]-?: OptionRule };

/** Longest delay a Node timer takes. */
const MAX_TIMER_MS = 0x7fff_ffff;

/** A rule from its description and its test. */
export const rule = (expected: string, accepts: (value: unknown) => boolean): OptionRule => ({ expected, accepts });

const isInteger = (value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): boolean =>
  typeof value === 'number' && Number.isSafeInteger(value) && value >= min && value <= max;
const isMs = (value: unknown, min: number): boolean =>
  typeof value === 'number' && Number.isFinite(value) && value >= min && value <= MAX_TIMER_MS;

/** The kinds of values options take. */
export const Accept = {
  count: rule('a positive integer', (v) => isInteger(v, 1)),
  bytes: rule('a non-negative integer number of bytes', (v) => isInteger(v, 0)),
  positiveBytes: rule('a positive integer number of bytes', (v) => isInteger(v, 1)),
  ms: rule(`milliseconds from 0 to ${MAX_TIMER_MS}`, (v) => isMs(v, 0)),
  positiveMs: rule(`milliseconds greater than 0, at most ${MAX_TIMER_MS}`, (v) => isMs(v, Number.MIN_VALUE)),
  integer: (min: number, max: number, unit: string): OptionRule => rule(`an integer number of ${unit} from ${min} to ${max}`, (v) => isInteger(v, min, max)),
  boolean: rule('true or false', (v) => typeof v === 'boolean'),
  nonEmptyString: rule('a non-empty string', (v) => typeof v === 'string' && v.length > 0),
  signal: rule('an AbortSignal', (v) => v instanceof AbortSignal),
  deadline: rule('milliseconds from now (a number; Infinity: none) or a valid Date',
    (v) => (typeof v === 'number' && !Number.isNaN(v)) || (v instanceof Date && !Number.isNaN(v.getTime()))),
  oneOf: (...values: readonly string[]): OptionRule =>
    rule(`one of ${values.map((value) => `'${value}'`).join(', ')}`, (v) => typeof v === 'string' && values.includes(v)),
  instanceOf: (type: abstract new (...args: never[]) => unknown): OptionRule => rule(`a ${type.name}`, (v) => v instanceof type),
} as const;

/** Checks `options` (undefined: all defaults) against `rules`; INVALID_ARGUMENT for the first bad
 *  value, and for a key that is a misspelling of an option (`dedline`: the call had no deadline at
 *  all, silently). Other keys are left alone: callers may pass objects that carry more. */
export function checkOptions<T>(owner: string, options: T | undefined, rules: OptionRules<T>): void {
  if (options === undefined) return;
  if (!isRecord(options)) throw new GdrpcError(Code.INVALID_ARGUMENT, `${owner} must be an object, got ${describeValue(options)}`);
  for (const [name, check] of ruleEntries(rules)) {
    const value = (options as Record<string, unknown>)[name];
    if (value !== undefined && !check.accepts(value)) throw invalidOption(`${owner}.${name}`, value, check.expected);
  }
  for (const key of Object.keys(options)) {
    if (Object.hasOwn(rules, key)) continue;
    const meant = misspeltCached(key, rules);
    if (meant !== undefined) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `${owner}.${key} is not an option: did you mean ${meant}?`, { details: { option: `${owner}.${key}` } });
    }
  }
}

/** Verdicts of misspelt() by rule table and key: an object that carries more than options (a
 *  caller's trace id with every call) pays the edit distances once per key, not once per call
 *  (18.9 µs a call with six extra keys, a review measured). At most MISSPELT_KEPT keys a table. */
const verdicts = new WeakMap<object, Map<string, string | null>>();
const MISSPELT_KEPT = 1024;

function misspeltCached<T>(key: string, rules: OptionRules<T>): string | undefined {
  let table = verdicts.get(rules);
  if (table === undefined) verdicts.set(rules, table = new Map());
  let meant = table.get(key);
  if (meant === undefined) {
    meant = misspelt(key, ruleEntries(rules)) ?? null;
    if (table.size >= MISSPELT_KEPT) table.clear();
    table.set(key, meant);
  }
  return meant ?? undefined;
}

/** The option `key` misspells, if any: the same name but for case, or within one edit (two for
 *  names of 8 characters or more); keys under 4 characters are never taken for one. No two
 *  options of the runtime's tables are that close to each other. */
function misspelt(key: string, entries: ReadonlyArray<[string, OptionRule]>): string | undefined {
  if (key.length < 4) return undefined;
  const lower = key.toLowerCase();
  for (const [name] of entries) {
    const limit = name.length >= 8 ? 2 : 1;
    if (editDistance(lower, name.toLowerCase(), limit) <= limit) return name;
  }
  return undefined;
}

/** Levenshtein distance between `a` and `b`, or limit + 1 once it is past `limit` (the
 *  misspelling checks here and the schema compiler's "did you mean"). */
export function editDistance(a: string, b: string, limit: number): number {
  if (Math.abs(a.length - b.length) > limit) return limit + 1;
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i += 1) {
    const row = [i];
    let best = i;
    for (let j = 1; j <= b.length; j += 1) {
      row[j] = Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
      best = Math.min(best, row[j]!);
    }
    if (best > limit) return limit + 1;
    previous = row;
  }
  return previous[b.length]!;
}

/** The entries of each rule table, listed once: calls check their options on every call. */
const entriesOf = new WeakMap<object, Array<[string, OptionRule]>>();

function ruleEntries<T>(rules: OptionRules<T>): Array<[string, OptionRule]> {
  let entries = entriesOf.get(rules);
  if (entries === undefined) {
    entries = Object.entries(rules) as Array<[string, OptionRule]>;
    entriesOf.set(rules, entries);
  }
  return entries;
}

/** INVALID_ARGUMENT for option `option` (e.g. "CallOptions.mover") holding `value`. */
export function invalidOption(option: string, value: unknown, expected: string): GdrpcError {
  return new GdrpcError(Code.INVALID_ARGUMENT, `${option} must be ${expected}, got ${describeValue(value)}`, { details: { option } });
}

/** A bad value as an error message shows it: numbers as written, strings quoted and cut short. */
export function describeValue(value: unknown): string {
  if (value === null || value === undefined || typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'symbol') return value.toString();
  if (Array.isArray(value)) return 'an array';
  const name = (value as object).constructor?.name;
  return name === undefined || name === 'Object' ? 'an object' : `a ${name}`;
}

/** An object that is not an array (a record of named values). */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
