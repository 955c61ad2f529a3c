// Payloads that came before their receive (core/rpc/connection/held-payloads.ts): announced ones
// are kept for their receive, unannounced ones a while and a few at most; everything is dropped
// through the given function (which receives a payload into nothing), never lost track of.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { HELD_PAYLOAD_MIN_WEIGHT, HeldPayloads, MAX_HELD_PAYLOADS, MAX_HELD_PAYLOADS_BEHIND } from '../../core/rpc/connection/held-payloads.ts';
import type { TakenMessage } from '../../core/ucx/index.ts';
import { HeldBytes } from '../../core/rpc/runtime/held-bytes.ts';

const message = (n: number): TakenMessage => ({ senderTag: BigInt(n), length: 8, taken: n }) as unknown as TakenMessage;

/** A connection's held payloads (weighed in `count` where given), and what they dropped. */
function recording(count?: HeldBytes): { held: HeldPayloads; dropped: TakenMessage[] } {
  const dropped: TakenMessage[] = [];
  return { held: new HeldPayloads((m) => dropped.push(m), count), dropped };
}

afterEach(() => { vi.useRealTimers(); });

describe('HeldPayloads', () => {
  it(`keeps ${MAX_HELD_PAYLOADS} unannounced payloads; one more, or a second for one transfer, is refused and dropped`, () => {
    const { held, dropped } = recording();
    for (let i = 0; i < MAX_HELD_PAYLOADS; i += 1) expect(held.hold(i, message(i))).toBe(true);
    const extra = message(1000);
    expect(held.hold(1000, extra)).toBe(false);
    expect(dropped).toEqual([extra]);
    const again = message(2000);
    expect(held.hold(3, again)).toBe(false);
    expect(dropped).toEqual([extra, again]);
    held.clear();
    expect(dropped).toHaveLength(2 + MAX_HELD_PAYLOADS);
  });

  it(`keeps ${MAX_HELD_PAYLOADS_BEHIND} while control messages of the connection's own wait to be read (their frames may be among them); one more is refused`, () => {
    const { held, dropped } = recording();
    for (let i = 0; i < MAX_HELD_PAYLOADS_BEHIND; i += 1) expect(held.hold(i, message(i), true)).toBe(true);
    // With none of its frames waiting, the count is the smaller one: refused at once.
    expect(held.hold(5000, message(5000), false)).toBe(false);
    expect(held.hold(5001, message(5001), true)).toBe(false);
    expect(dropped).toEqual([message(5000), message(5001)]);
    held.clear();
    expect(dropped).toHaveLength(2 + MAX_HELD_PAYLOADS_BEHIND);
  });

  it('remembers the bytes frames announced for a payload, those of a gather added up, until its receive takes it', () => {
    const held = new HeldPayloads(() => {});
    expect(held.announced(7)).toBeUndefined();
    held.expect(7, 100);
    held.expect(7, 100);  // a second tensor of the same gathered payload
    expect(held.announced(7)).toBe(200);
    held.hold(7, message(7));
    held.take(7);
    expect(held.announced(7)).toBeUndefined();
  });

  it('announced payloads are kept without that limit and taken by their receive', () => {
    const { held, dropped } = recording();
    for (let i = 0; i < 2 * MAX_HELD_PAYLOADS; i += 1) {
      held.expect(i, 8);
      expect(held.hold(i, message(i))).toBe(true);
    }
    expect(held.take(5)).toEqual(message(5));
    expect(held.take(5)).toBeUndefined();
    expect(dropped).toEqual([]);
  });

  it('drops an unannounced payload after the hold time with nothing else arriving; an announced one stays', () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
    const { held, dropped } = recording();
    held.expect(1, 8);
    held.hold(1, message(1));
    held.hold(2, message(2));
    vi.advanceTimersByTime(9_000);
    expect(dropped).toEqual([]);
    vi.advanceTimersByTime(2_000);
    expect(dropped).toEqual([message(2)]);
    expect(held.take(1)).toEqual(message(1));
    // The dropped one is remembered for its frame a minute, then forgotten too.
    expect(held.dropped(2)).toBe('expired');
    vi.advanceTimersByTime(60_000);
    expect(held.dropped(2)).toBeUndefined();
    expect(vi.getTimerCount()).toBe(0);
  });
});

describe("the runtime's weight of unannounced payloads", () => {
  const sized = (n: number, length: number): TakenMessage => ({ senderTag: BigInt(n), length, taken: n }) as unknown as TakenMessage;

  it(`weighs unannounced payloads by length, ${HELD_PAYLOAD_MIN_WEIGHT} bytes at least, until taken, dropped or cleared; announced ones not at all`, () => {
    const count = new HeldBytes(100_000);
    const held = new HeldPayloads(() => {}, count);
    held.hold(1, sized(1, 30_000));
    held.hold(2, sized(2, 20_000));
    held.hold(4, sized(4, 1));  // small ones add up too
    held.expect(3, 90_000);
    held.hold(3, sized(3, 90_000));  // announced: its call bounds it
    expect(count.total).toBe(50_000 + HELD_PAYLOAD_MIN_WEIGHT);
    held.take(1);
    expect(count.total).toBe(20_000 + HELD_PAYLOAD_MIN_WEIGHT);
    held.clear();
    expect(count.total).toBe(0);
  });

  it('past the limit the connection holding the most drops its newest payloads until the rest fits; the others keep theirs', () => {
    const count = new HeldBytes(100_000);
    const droppedA: TakenMessage[] = [];
    const droppedB: TakenMessage[] = [];
    const a = new HeldPayloads((m) => droppedA.push(m), count);
    const b = new HeldPayloads((m) => droppedB.push(m), count);
    a.hold(1, sized(1, 30_000));
    a.hold(2, sized(2, 30_000));
    b.hold(1, sized(1, 30_000));
    expect(count.total).toBe(90_000);
    // 110,000: a holds the most (60,000) and drops its newest, though b tipped it over.
    b.hold(2, sized(2, 20_000));
    expect(droppedA).toEqual([sized(2, 30_000)]);
    expect(droppedB).toEqual([]);
    expect(count.total).toBe(80_000);
    expect([a.dropped(1), a.dropped(2), b.dropped(1), b.dropped(2)]).toEqual([undefined, 'weight', undefined, undefined]);
    // One larger than the whole limit is dropped on its own arrival.
    b.hold(3, sized(3, 150_000));
    expect(droppedB).toEqual([sized(3, 150_000)]);
    expect(b.dropped(3)).toBe('weight');
    expect(count.total).toBe(80_000);
    // The others are still there for their receives.
    expect(a.take(1)).toEqual(sized(1, 30_000));
    expect(b.take(1)).toEqual(sized(1, 30_000));
    expect(b.take(3)).toBeUndefined();
    expect(count.total).toBe(20_000);
    a.clear();
    b.clear();
    expect(count.total).toBe(0);
  });

  it("a dropped payload is remembered until its frame's refusal forgets it, counts as held, and a second payload for it is refused", () => {
    const count = new HeldBytes(10_000);
    const { held, dropped } = recording(count);
    held.hold(1, sized(1, 20_000));
    expect(held.dropped(1)).toBe('weight');
    expect(held.hold(1, sized(1, 8))).toBe(false);
    expect(held.forgetDropped(1)).toBe(true);
    expect(held.forgetDropped(1)).toBe(false);
    expect(held.dropped(1)).toBeUndefined();
    // Dropped ones count towards MAX_HELD_PAYLOADS with those held.
    for (let i = 100; i < 100 + MAX_HELD_PAYLOADS; i += 1) held.hold(i, sized(i, 20_000));
    expect(held.hold(1000, sized(1000, 8))).toBe(false);
    expect(count.total).toBe(0);
  });

  it('forgets a dropped payload a minute after it came', () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
    const held = new HeldPayloads(() => {}, new HeldBytes(10_000));
    held.hold(1, sized(1, 20_000));
    expect(held.dropped(1)).toBe('weight');
    vi.advanceTimersByTime(59_000);
    expect(held.dropped(1)).toBe('weight');
    vi.advanceTimersByTime(12_000);
    expect(held.dropped(1)).toBeUndefined();
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a payload held unannounced weighs nothing once its frame announces it, and is not dropped for weight', () => {
    const count = new HeldBytes(100_000);
    const { held, dropped } = recording(count);
    held.hold(1, sized(1, 60_000));
    held.expect(1, 60_000);  // its frame was read; its receive waits (for pool memory)
    expect(count.total).toBe(0);
    held.hold(2, sized(2, 90_000));
    held.hold(3, sized(3, 20_000));  // 110,000 unannounced: the newest goes, not the announced one
    expect(dropped).toEqual([sized(3, 20_000)]);
    expect(held.take(1)).toEqual(sized(1, 60_000));
    expect(count.total).toBe(90_000);
    held.clear();
    expect(count.total).toBe(0);
  });

  it("one held larger than its frames announced keeps its weight until taken, and is not dropped for it either; a gather's tensors add up", () => {
    const count = new HeldBytes(100_000);
    const { held, dropped } = recording(count);
    held.hold(1, sized(1, 60_000));
    held.expect(1, 30_000);  // the first tensor of a gather
    expect(count.total).toBe(60_000);
    held.expect(1, 30_000);  // the second: all its bytes announced
    expect(count.total).toBe(0);
    held.hold(2, sized(2, 60_000));
    held.expect(2, 1_000);  // announced smaller: its receive fails on truncation
    expect(count.total).toBe(60_000);
    held.hold(3, sized(3, 50_000));  // 110,000: not 2 (announced), the newest unannounced goes
    expect(dropped).toEqual([sized(3, 50_000)]);
    expect(held.take(2)).toEqual(sized(2, 60_000));
    expect(count.total).toBe(0);
  });

  it('a holder that lets go of nothing is passed over for the next largest', () => {
    const count = new HeldBytes(100_000);
    const stuck = { relieve: vi.fn(() => 0) };
    const { held: other, dropped } = recording(count);
    count.add(stuck, 80_000);
    other.hold(1, sized(1, 10_000));
    other.hold(2, sized(2, 20_000));  // 110,000: the largest frees nothing, the next drops its newest
    expect(stuck.relieve).toHaveBeenCalledTimes(1);
    expect(dropped).toEqual([sized(2, 20_000)]);
    expect(count.total).toBe(90_000);
  });
});
