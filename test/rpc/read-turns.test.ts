// Whose turn it is to be read once the dispatcher falls behind (core/rpc/runtime/read-turns.ts),
// without a dispatcher: holders with balances, turns taken and charged by hand.
import { describe, expect, it } from 'vitest';
import { ReadTurns, TURN_QUANTUM_MS, type TurnHolder } from '../../core/rpc/runtime/read-turns.ts';
import { ownTimeClock } from '../../core/ucx/index.ts';

interface Named extends TurnHolder { name: string }

function turns(...holders: Named[]): ReadTurns<Named> {
  return new ReadTurns(() => holders[Symbol.iterator]());
}

describe('read turns', () => {
  it('a holder in debt sits its turns out; one whose messages take microseconds reads at each', () => {
    const slow: Named = { name: 'slow', balance: -1 };
    const fast: Named = { name: 'fast', balance: 0 };
    const order = turns(slow, fast);
    expect((order.next() as Named).name).toBe('fast');
    order.charge(fast, fast, 0.01);
    // Still positive: its turn goes on.
    expect((order.next() as Named).name).toBe('fast');
  });

  it('after a round that read nothing, a free round reads one message, not one of each holder in debt', () => {
    // 60 holders deep in debt (a costly message each, read before): before, the free round read
    // one message of each, and an honest holder's message that came meanwhile waited behind all.
    const debtors: Named[] = Array.from({ length: 60 }, (_, i) => ({ name: `d${i}`, balance: -50 }));
    const honest: Named = { name: 'honest', balance: 0 };
    const order = turns(...debtors, honest);
    const read: string[] = [];
    // The honest holder has nothing to read now: its turns end at once; the line finds nothing it
    // can read either (no message of no connection).
    for (let step = 0; step < 200 && read.length < 2; step += 1) {
      const turn = order.next();
      if (turn === order.line) { order.end(); continue; }
      const holder = turn as Named;
      if (holder === honest) { order.end(); continue; }
      order.charge(turn, holder, 50);
      read.push(holder.name);
    }
    // One debtor's message per free round; the next free round comes only after a round that read
    // nothing, and the honest holder's turn comes in every round between.
    expect(read).toEqual(['d0', 'd0']);
    expect(debtors[1]!.balance).toBeGreaterThan(-50);
    expect(debtors[1]!.balance).toBeLessThan(-50 + 10 * TURN_QUANTUM_MS);
  });

  it("the dispatcher's clock for charges is the thread's own time: a sleep counts, and it never runs ahead of wall time", () => {
    // Own time leaves out only what the thread waited for a CPU (another process ran): a
    // synchronous handler that blocks the reading thread is charged for it, as is work.
    const ownTime = ownTimeClock();
    const wallBefore = performance.now();
    const ownBefore = ownTime();
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
    const slept = ownTime() - ownBefore;
    expect(slept).toBeGreaterThanOrEqual(90);
    expect(slept).toBeLessThanOrEqual(performance.now() - wallBefore + 1);
    // Work: it advances however slowly a busy machine lets this thread run (bounded by wall time).
    // It is not monotonic: the kernel adds a run-queue wait when the thread runs again, and under
    // two CPU hogs a reading after the loop came 2.7 ms below the one that ended it (the
    // dispatcher charges such a step the 1 µs floor): what is asserted is that the loop ended by
    // own time, and that no reading ran ahead of wall time.
    const spinStart = ownTime();
    const spinWall = performance.now();
    const giveUp = spinWall + 30_000;
    let spun = 0;
    while (spun < 5 && performance.now() < giveUp) {
      spun = ownTime() - spinStart;
      expect(spun).toBeLessThanOrEqual(performance.now() - spinWall + 1);
    }
    expect(spun).toBeGreaterThanOrEqual(5);
  });
});
