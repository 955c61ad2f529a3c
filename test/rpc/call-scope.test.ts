// CallScope's abort callbacks (core/rpc/call/deadline.ts): kept in a Set, so that taking one out
// costs the same however many are registered (a client stream races each item's receive).
import { describe, expect, it, vi } from 'vitest';
import { CallScope } from '../../core/rpc/call/deadline.ts';
import { Code, GdrpcError } from '../../core/index.ts';

const aborted = (): GdrpcError => new GdrpcError(Code.CANCELLED, 'test abort');

describe('CallScope.onAbort', () => {
  it('runs a function registered twice twice; taking back one leaves the other', () => {
    const scope = new CallScope(undefined);
    const fn = vi.fn();
    const offFirst = scope.onAbort(fn);
    scope.onAbort(fn);
    offFirst();
    scope.abort(aborted());
    expect(fn).toHaveBeenCalledTimes(1);
  });

  it('20,000 callbacks taken back one by one, oldest first, are not called; races settled before leave none', async () => {
    const scope = new CallScope(undefined);
    const fns = Array.from({ length: 20_000 }, () => vi.fn());
    const offs = fns.map((fn) => scope.onAbort(fn));
    for (const off of offs) off();
    const values = await Promise.all(Array.from({ length: 20_000 }, (_, i) => scope.race(Promise.resolve(i))));
    expect(values[19_999]).toBe(19_999);
    const late = vi.fn();
    scope.onAbort(late);
    scope.abort(aborted());
    expect(fns.filter((fn) => fn.mock.calls.length > 0)).toHaveLength(0);
    expect(late).toHaveBeenCalledTimes(1);
  });

  it('a race pending at the abort rejects with the scope\'s error, in registration order with the rest', async () => {
    const scope = new CallScope(undefined);
    const order: string[] = [];
    scope.onAbort(() => order.push('first'));
    const pending = scope.race(new Promise<never>(() => {}));
    scope.onAbort(() => order.push('last'));
    const error = aborted();
    scope.abort(error);
    await expect(pending).rejects.toBe(error);
    expect(order).toEqual(['first', 'last']);
  });
});
