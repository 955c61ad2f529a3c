// Payloads that came before their receive (core/rpc/connection/held-payloads.ts): announced ones
// are kept for their receive, unannounced ones a while and a few at most; everything is dropped
// through the given function (which receives a payload into nothing), never lost track of.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { HELD_PAYLOAD_MIN_WEIGHT, HeldPayloads, MAX_HELD_PAYLOADS, MAX_HELD_PAYLOADS_BEHIND } from '../../core/rpc/connection/held-payloads.ts';
import type { TakenMessage } from '../../core/ucx/index.ts';
import { HeldBytes } from '../../core/rpc/runtime/held-bytes.ts';

const message = (n: number): TakenMessage => ({ senderTag: BigInt(n), length: 8, taken: n }) as unknown as TakenMessage;

afterEach(() => { vi.useRealTimers(); });

describe('HeldPayloads', () => {
  it(`keeps ${MAX_HELD_PAYLOADS} unannounced payloads; one more, or a second for one transfer, is refused and dropped`, () => {
    const dropped: TakenMessage[] = [];
    const held = new HeldPayloads((m) => dropped.push(m));
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
    const dropped: TakenMessage[] = [];
    const held = new HeldPayloads((m) => dropped.push(m));
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
    const dropped: TakenMessage[] = [];
    const held = new HeldPayloads((m) => dropped.push(m));
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
    const dropped: TakenMessage[] = [];
    const held = new HeldPayloads((m) => dropped.push(m));
    held.expect(1, 8);
    held.hold(1, message(1));
    held.hold(2, message(2));
    vi.advanceTimersByTime(9_000);
    expect(dropped).toEqual([]);
    vi.advanceTimersByTime(2_000);
    expect(dropped).toEqual([message(2)]);
    expect(held.take(1)).toEqual(message(1));
    expect(vi.getTimerCount()).toBe(0);
  });
});

describe("the runtime's weight of unannounced payloads", () => {
  const sized = (n: number, length: number): TakenMessage => ({ senderTag: BigInt(n), length, taken: n }) as unknown as TakenMessage;

  /** A connection's HeldPayloads weighed in `count`, closed (cleared) when shed, as Payloads does. */
  function connection(count: HeldBytes, name: string, shed: string[]): HeldPayloads {
    const held: HeldPayloads = new HeldPayloads(() => {}, {
      count,
      holder: { shed: (bytes, total, limit) => { shed.push(`${name} ${bytes}/${total}/${limit}`); held.clear(); } },
    });
    return held;
  }

  it(`weighs unannounced payloads by length, ${HELD_PAYLOAD_MIN_WEIGHT} bytes at least, until taken, dropped or cleared; announced ones not at all`, () => {
    const count = new HeldBytes(100_000);
    const held = connection(count, 'a', []);
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

  it('past the limit the connection holding the most is closed, largest first, until the rest fits', () => {
    const count = new HeldBytes(100_000);
    const shed: string[] = [];
    const a = connection(count, 'a', shed);
    const b = connection(count, 'b', shed);
    a.hold(1, sized(1, 60_000));
    b.hold(1, sized(1, 30_000));
    expect(shed).toEqual([]);
    b.hold(2, sized(2, 20_000));  // 110,000: a holds the most (60,000) and goes, though b tipped it over
    expect(shed).toEqual(['a 60000/110000/100000']);
    expect(count.total).toBe(50_000);
    b.hold(3, sized(3, 60_000));  // b alone past it
    expect(shed).toEqual(['a 60000/110000/100000', 'b 110000/110000/100000']);
    expect(count.total).toBe(0);
    a.clear();
    b.clear();
    expect(count.total).toBe(0);  // what a shed holder lets go of is not taken off twice
  });
});
