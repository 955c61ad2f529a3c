import { describe, expect, it } from 'vitest';
import { SettleRule, warmUp } from '../../bench/warm.ts';

/** Feeds p50s to a rule until it says the warm-up is over; the calls it took. */
function callsFor(rule: SettleRule, p50s: (windowIndex: number) => number, elapsedMs = () => 0): number {
  for (let w = 0; ; w += 1) if (rule.next(p50s(w), elapsedMs())) return rule.calls;
}

describe('bench warm-up', () => {
  it('goes on while the windows keep getting faster, and ends once they stop', () => {
    // 200 us falling by 10% a window down to 25 us (windows 0 to 20 each beat the one before),
    // then flat: six more windows.
    const falling = (w: number): number => Math.max(25, 200 * 0.9 ** w);
    const calls = callsFor(new SettleRule({ window: 500, minCalls: 1000, settleWindows: 6 }), falling);
    expect(calls).toBe((21 + 6) * 500);
  });

  it('makes minCalls even when the first windows are flat', () => {
    expect(callsFor(new SettleRule({ window: 500, minCalls: 4000, settleWindows: 2 }), () => 30)).toBe(4000);
  });

  it('takes a late drop as a reason to go on (a plateau is not the end)', () => {
    // Flat at 40 us for 5 windows, 25 us from the 6th: with 6 windows to settle, the drop comes first.
    const plateau = (w: number): number => (w < 6 ? 40 : 25);
    expect(callsFor(new SettleRule({ window: 100, minCalls: 100, settleWindows: 6 }), plateau)).toBe((6 + 1 + 6) * 100);
  });

  it('ends at maxCalls, and after maxMs once minCalls are made, whatever the windows say', () => {
    let p = 1000;
    expect(callsFor(new SettleRule({ window: 500, minCalls: 1000, maxCalls: 5000 }), () => (p *= 0.5))).toBe(5000);
    let ms = 0;
    const slow = callsFor(new SettleRule({ window: 500, minCalls: 2000, maxMs: 100 }), () => (p *= 0.5), () => (ms += 60));
    expect(slow).toBe(2000);
  });

  it('warmUp calls its function the rule\'s number of times and reports the windows', async () => {
    let made = 0;
    const warmed = await warmUp(async () => { made += 1; }, { window: 50, minCalls: 200, maxCalls: 1000 });
    expect(warmed.calls).toBe(made);
    expect(made % 50).toBe(0);
    expect(made).toBeGreaterThanOrEqual(200);
    expect(made).toBeLessThanOrEqual(1000);
    expect(warmed.firstP50Us).toBeGreaterThan(0);
    expect(warmed.lastP50Us).toBeGreaterThan(0);
  });
});
