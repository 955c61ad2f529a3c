// The pool's queue of waiting allocations (core/tensor/wait-queue.ts): whose turn it is, each
// claimant's waiters in their order, O(1) leaving from anywhere, and a choice of the next waiter
// that looks at claimants, not at every waiter (a peer may queue tens of thousands).
import { describe, expect, it } from 'vitest';
import { PoolShare } from '../../core/tensor/index.ts';
import { WaitQueue, type QueuedWaiter } from '../../core/tensor/wait-queue.ts';

const waiter = (name: string, bytes: number, share?: PoolShare): QueuedWaiter & { name: string } => ({ name, bytes, share });
const names = (queue: WaitQueue<QueuedWaiter & { name: string }>): string[] => queue.all().map((w) => w.name);

/** A share that counts how often it is asked whether it admits an allocation. */
class CountingShare extends PoolShare {
  asked = 0;
  override admits(bytes: number): boolean {
    this.asked += 1;
    return super.admits(bytes);
  }
}

describe('WaitQueue', () => {
  it('keeps arrival order, leaves from the head, the middle and the tail, and says who is queued', () => {
    const queue = new WaitQueue<QueuedWaiter & { name: string }>();
    const share = new PoolShare(100);
    const list = ['a', 'b', 'c', 'd', 'e'].map((name, i) => waiter(name, 10, i % 2 === 0 ? share : undefined));
    for (const w of list) queue.push(w);
    queue.push(list[0]!);  // already queued: no second entry
    expect(queue.size).toBe(5);
    expect(names(queue)).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(queue.delete(list[2]!)).toBe(true);
    expect(queue.delete(list[2]!)).toBe(false);
    expect(queue.has(list[2]!)).toBe(false);
    expect(queue.delete(list[0]!)).toBe(true);
    expect(queue.delete(list[4]!)).toBe(true);
    expect(names(queue)).toEqual(['b', 'd']);
    expect(queue.next()?.name).toBe('b');
    expect(queue.delete(list[1]!)).toBe(true);
    expect(queue.delete(list[3]!)).toBe(true);
    expect(queue.size).toBe(0);
    expect(queue.next()).toBeUndefined();
    // Empty lines are gone: a claimant queued again starts a new one.
    queue.push(list[4]!);
    expect(queue.next()?.name).toBe('e');
  });

  it('the earliest first waiter of a claimant under its share goes next; with none, the earliest of all', () => {
    const queue = new WaitQueue<QueuedWaiter & { name: string }>();
    const greedy = new PoolShare(100);
    greedy.held = 100;  // at its share: admits nothing more while it holds anything
    const other = new PoolShare(100);
    other.held = 40;
    queue.push(waiter('greedy-1', 10, greedy));
    queue.push(waiter('other-big', 80, other));  // 40 + 80 > 100: over its share
    queue.push(waiter('other-small', 10, other));
    expect(queue.next()?.name).toBe('greedy-1');  // nobody admits: the earliest of all
    const free = waiter('no-share', 500);
    queue.push(free);
    expect(queue.next()?.name).toBe('no-share');  // no share: always admitted
    queue.delete(free);
    other.held = 10;  // now other's first waiter fits its share
    expect(queue.next()?.name).toBe('other-big');
    // A claimant's small waiter does not overtake its own earlier one.
    other.held = 40;
    greedy.held = 0;
    expect(queue.next()?.name).toBe('greedy-1');
  });

  it('choosing the next waiter asks each waiting claimant once, however many waiters it has', () => {
    const queue = new WaitQueue<QueuedWaiter>();
    const greedy = new CountingShare(100);
    greedy.held = 100;
    const other = new CountingShare(100);
    for (let i = 0; i < 10_000; i++) queue.push({ bytes: 1, share: greedy });
    const turn = { bytes: 1, share: other };
    queue.push(turn);
    expect(queue.next()).toBe(turn);
    expect(greedy.asked).toBe(1);
    expect(other.asked).toBe(1);
  });
});
