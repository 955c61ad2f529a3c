// One 'abort' listener per signal however many wait on it (core/abort.ts): the callbacks of a
// shared signal, and the calls of a caller who cancels a batch of them with one AbortController.
import { getEventListeners } from 'node:events';
import { describe, expect, it, vi } from 'vitest';
import { whenAborted } from '../../core/abort.ts';
import { CallScope } from '../../core/rpc/call/deadline.ts';
import { Code } from '../../core/errors.ts';

describe('whenAborted', () => {
  it('10,000 callbacks hold one listener; the abort runs each once, except those taken back', () => {
    const controller = new AbortController();
    const runs = new Array<number>(10_000).fill(0);
    const offs = runs.map((_, i) => whenAborted(controller.signal, () => { runs[i]! += 1; }));
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(1);
    for (let i = 0; i < 10_000; i += 2) offs[i]!();
    controller.abort();
    controller.abort();
    expect(runs.filter((n, i) => n !== (i % 2 === 0 ? 0 : 1))).toEqual([]);
  });

  it('a callback that throws keeps the others running; its error is reported as uncaught', async () => {
    const controller = new AbortController();
    const ran: string[] = [];
    const uncaught = new Promise<unknown>((resolve) => process.once('uncaughtException', resolve));
    whenAborted(controller.signal, () => { ran.push('first'); });
    whenAborted(controller.signal, () => { throw new Error('listener bug'); });
    whenAborted(controller.signal, () => { ran.push('third'); });
    controller.abort();
    expect(ran).toEqual(['first', 'third']);
    expect(((await uncaught) as Error).message).toBe('listener bug');
  });

  it('a callback may take back one that has not run yet', () => {
    const controller = new AbortController();
    const ran: string[] = [];
    let offSecond = (): void => {};
    whenAborted(controller.signal, () => { ran.push('first'); offSecond(); });
    offSecond = whenAborted(controller.signal, () => { ran.push('second'); });
    controller.abort();
    expect(ran).toEqual(['first']);
  });

  it('signals are apart: another signal has its own listener and its own callbacks', () => {
    const a = new AbortController();
    const b = new AbortController();
    const ran: string[] = [];
    whenAborted(a.signal, () => ran.push('a'));
    whenAborted(b.signal, () => ran.push('b'));
    a.abort();
    expect(ran).toEqual(['a']);
    expect(getEventListeners(b.signal, 'abort')).toHaveLength(1);
  });
});

describe('calls under one caller signal (CallScope)', () => {
  it('5,000 scopes share one listener; aborting ends the live ones CANCELLED, not the disposed', () => {
    vi.useRealTimers();
    const controller = new AbortController();
    const scopes = Array.from({ length: 5000 }, () => new CallScope(undefined, controller.signal));
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(1);
    const ended = scopes.slice(0, 100);
    for (const scope of ended) scope.dispose();
    controller.abort(new Error('user stop'));
    expect(ended.every((scope) => !scope.aborted)).toBe(true);
    const live = scopes.slice(100);
    expect(live.every((scope) => scope.reason?.code === Code.CANCELLED)).toBe(true);
    // A scope made under the aborted signal starts ended.
    expect(new CallScope(undefined, controller.signal).reason?.code).toBe(Code.CANCELLED);
  });
});
