// Refusing a tensor's bytes (core/rpc/movers/tag.ts refuse) matches the payload into one byte so
// that nothing stays pending in UCX. On a connection that has closed there is nothing to match:
// its end dropped the payloads it held and unregistered it. A frame of 16,384 tensors refused as
// its connection closed posted 16,384 receives that could only fail, an error made for each (a
// second of the server's event loop on the CPU box, scratch). refuseRaw, which finds a refused
// frame's payloads in whatever the peer sent, walks it with a loop: a peer chooses the nesting.
import { describe, expect, it, vi } from 'vitest';
import { tagMover } from '../../core/rpc/movers/tag.ts';
import { refuseRaw } from '../../core/rpc/transfer/refuse.ts';
import type { TransferScope } from '../../core/rpc/movers/mover.ts';
import type { TensorWire } from '../../core/wire/frames.ts';
import { RefusalCount, type RefusingHolder } from '../../core/rpc/runtime/refusals.ts';
import type { GdrpcError } from '../../core/errors.ts';

/** A connection as the tag mover's refuse sees it, its worker's receives counted. */
function scopeWith(signal: AbortSignal): { scope: TransferScope; receives: ReturnType<typeof vi.fn> } {
  const receives = vi.fn(() => Promise.resolve({ senderTag: 0n, length: 1 }));
  const connection = {
    signal,
    get isOpen(): boolean { return !signal.aborted; },
    runtime: { worker: { tagRecv: receives, tagRecvTaken: receives }, describes: false, refusals: new RefusalCount() },
    payloads: {
      receiving: <T>(receive: () => Promise<T>): Promise<T> => receive(),
      takeHeld: () => undefined,
      watchTransfer: () => () => {},
      expect: () => {},
      dropped: () => undefined,
      forgetDropped: () => false,
      checkAnnounced: () => {},
    },
    incomingDataTag: (x: number) => BigInt(x),
    refusing: 0,
    reports: { forget: () => {} },
    close: vi.fn(),
  };
  return { scope: { connection: connection as unknown as TransferScope['connection'], call: 1 }, receives };
}

const wire = (x: number): TensorWire => ({ dt: 'u8', sh: [1], n: 1, mt: 'host', m: 't', x });

describe('tag mover refuse', () => {
  it('on an open connection matches the payload into one byte', async () => {
    const { scope, receives } = scopeWith(new AbortController().signal);
    await tagMover.refuse(wire(7), scope);
    expect(receives).toHaveBeenCalledTimes(1);
    expect((receives.mock.calls[0] as unknown[])[0]).toEqual(new Uint8Array(1));
    expect((receives.mock.calls[0] as unknown[])[1]).toBe(7n);
  });

  it('on a closed connection posts nothing: 16,384 refusals, no receive', async () => {
    const closed = new AbortController();
    closed.abort(new Error('connection closed'));
    const { scope, receives } = scopeWith(closed.signal);
    await Promise.all(Array.from({ length: 16_384 }, (_, x) => tagMover.refuse(wire(x), scope)));
    expect(receives).not.toHaveBeenCalled();
  });
});

describe('refuseRaw', () => {
  it('finds the payloads of a frame nested 100,000 levels deep, in arrays and maps, without recursion', async () => {
    const { scope, receives } = scopeWith(new AbortController().signal);
    let value: unknown = [wire(7), { y: wire(8) }];
    for (let depth = 0; depth < 100_000; depth += 1) value = depth % 2 === 0 ? [value] : { k: value };
    await refuseRaw(scope, { a: value });
    expect(receives.mock.calls.map((call) => (call as unknown[])[1])).toEqual([7n, 8n]);
    expect(scope.connection.refusing).toBe(0);
    expect(scope.connection.runtime.refusals.total).toBe(0);
  });
});

describe("the runtime's count of tensors being turned away", () => {
  /** A connection turning tensors away as refuseRaw counts them: begin, then settle one by one. */
  function holder(name: string, closed: string[]): RefusingHolder & { refusing: number; isOpen: boolean } {
    const self = {
      peer: name,
      refusing: 0,
      isOpen: true,
      close(error: GdrpcError) {
        self.isOpen = false;
        closed.push(`${name}: ${error.code} ${error.rawMessage}`);
      },
    };
    return self;
  }
  function turnAway(count: RefusalCount, who: ReturnType<typeof holder>, n: number): boolean {
    if (!count.begin(who, n)) return false;
    who.refusing += n;
    return true;
  }
  function settle(count: RefusalCount, who: ReturnType<typeof holder>, n: number): void {
    for (let i = 0; i < n; i += 1) {
      who.refusing -= 1;
      count.settled(who, who.refusing);
    }
  }

  it('up to the limit nobody is closed; past it the open holder turning away the most is, the newcomer on a tie', () => {
    const count = new RefusalCount(100);
    const closed: string[] = [];
    const [a, b, c] = ['a', 'b', 'c'].map((name) => holder(name, closed)) as [ReturnType<typeof holder>, ReturnType<typeof holder>, ReturnType<typeof holder>];
    expect(turnAway(count, a, 60)).toBe(true);
    expect(turnAway(count, b, 40)).toBe(true);
    expect([count.total, closed]).toEqual([100, []]);
    // c's 10 tip it over: a turns away the most and is closed; c's go on.
    expect(turnAway(count, c, 10)).toBe(true);
    expect(closed).toEqual(['a: RESOURCE_EXHAUSTED a has 60 tensors of refused frames to turn away, the most while this runtime\'s connections turn away 110 (at most 100 together; docs/security.md)']);
    // a's refusals settle as its receives are cancelled.
    settle(count, a, 60);
    expect(count.total).toBe(50);
    // b asks for 60 more: b itself would then turn away the most (100), and is refused.
    expect(turnAway(count, b, 60)).toBe(false);
    expect(closed.at(-1)).toMatch(/^b: RESOURCE_EXHAUSTED b has 100 tensors/);
    expect([count.total, b.refusing]).toEqual([50, 40]);
    // A tie goes against the newcomer; a closed holder is never chosen again.
    settle(count, b, 40);
    const d = holder('d', closed);
    expect(turnAway(count, c, 40)).toBe(true);  // c: 50, total 50
    expect(turnAway(count, d, 50)).toBe(true);  // 100
    expect(turnAway(count, a, 1)).toBe(true);  // a is closed: c or d, 50 each: c, found first
    expect(closed.at(-1)).toMatch(/^c: RESOURCE_EXHAUSTED c has 50 tensors/);
    settle(count, c, 50);
    settle(count, d, 50);
    settle(count, a, 1);
    expect(count.total).toBe(0);
  });
});
