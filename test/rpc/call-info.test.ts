// The per-call report on results (core/rpc/movers/call-info.ts): kept in a private field, so a
// result stays a plain object to everything but callInfo().
import { describe, expect, it } from 'vitest';
import { attachCallInfo } from '../../core/rpc/movers/call-info.ts';
import { callInfo } from '../../core/index.ts';

const report = (durationMs: number) => ({ transfers: [], durationMs });

describe('callInfo', () => {
  it('reads what was attached, and leaves no key that reflection, spread or equality sees', () => {
    const info = report(1.5);
    const result = attachCallInfo({ n: 7 }, info);
    expect(callInfo(result)).toBe(info);
    expect(Object.keys(result)).toEqual(['n']);
    expect(Object.getOwnPropertySymbols(result)).toEqual([]);
    expect(Reflect.ownKeys(result)).toEqual(['n']);
    expect(result).toStrictEqual({ n: 7 });
    expect(JSON.stringify(result)).toBe('{"n":7}');
    // A copy is a plain object without the report.
    expect(callInfo({ ...result })).toBeUndefined();
  });

  it('is undefined for objects that came from no call, and a second report replaces the first', () => {
    expect(callInfo({})).toBeUndefined();
    expect(callInfo([])).toBeUndefined();
    const target = {};
    attachCallInfo(target, report(1));
    const second = report(2);
    attachCallInfo(target, second);
    expect(callInfo(target)).toBe(second);
  });

  it('attaches to a frozen object and to class instances alike', () => {
    const frozen = Object.freeze({ n: 1 });
    const info = report(3);
    expect(attachCallInfo(frozen, info)).toBe(frozen);
    expect(callInfo(frozen)).toBe(info);
    class Box { constructor(readonly n: number) {} }
    const box = attachCallInfo(new Box(2), info);
    expect(box).toBeInstanceOf(Box);
    expect(callInfo(box)).toBe(info);
  });
});
