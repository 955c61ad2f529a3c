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

/** A connection as the tag mover's refuse sees it, its worker's receives counted. */
function scopeWith(signal: AbortSignal): { scope: TransferScope; receives: ReturnType<typeof vi.fn> } {
  const receives = vi.fn(() => Promise.resolve({ senderTag: 0n, length: 1 }));
  const connection = {
    signal,
    get isOpen(): boolean { return !signal.aborted; },
    runtime: { worker: { tagRecv: receives, tagRecvTaken: receives }, describes: false },
    payloads: {
      receiving: <T>(receive: () => Promise<T>): Promise<T> => receive(),
      takeHeld: () => undefined,
      watchTransfer: () => () => {},
      expect: () => {},
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
  });
});
