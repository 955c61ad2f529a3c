// The tensors of one frame are allocated and their receives posted RECEIVE_SLICE at a time, each
// slice in its own turn of the event loop (core/rpc/transfer/transfer.ts): a frame may announce
// 16,384 tensors, and taking them all in one turn held the server's event loop 0.27-0.34 s on the
// CPU box (scratch: one frame of 16,384 1-byte host tensors), every other connection waiting.
import { describe, expect, it, vi } from 'vitest';
import { IncomingTensors, PendingTensor, RECEIVE_SLICE } from '../../core/rpc/transfer/transfer.ts';
import type { TransferScope } from '../../core/rpc/movers/mover.ts';
import { Code, GdrpcError, Tensor } from '../../core/index.ts';
import type { TensorWire } from '../../core/wire/frames.ts';

/** Counts turns of the event loop: one setImmediate after another until stopped. */
function turnCounter(): { readonly turn: number; stop(): void } {
  let turn = 0;
  let stopped = false;
  const next = (): void => {
    if (stopped) return;
    turn += 1;
    setImmediate(next);
  };
  setImmediate(next);
  return { get turn() { return turn; }, stop: () => { stopped = true; } };
}

/** A connection as the tag mover sees it: every receive completes with the announced length. */
function scopeOf(receives: ReturnType<typeof vi.fn>): TransferScope {
  const signal = new AbortController().signal;
  const connection = {
    signal,
    isOpen: true,
    peer: 'test peer',
    endpoint: { transports: () => [{ transport: 'tcp' }] },
    peerLimits: {},
    runtime: { worker: { tagRecv: receives, tagRecvTaken: receives }, describes: false, hostStagingForTests: false },
    receiving: <T>(receive: () => Promise<T>): Promise<T> => receive(),
    takeHeld: () => undefined,
    watchTransfer: () => () => {},
    incomingDataTag: (x: number) => BigInt(x),
    reports: { forget: () => {}, reading: <T>(report: string, read: (report: string) => T) => read(report) },
  };
  return { connection: connection as unknown as TransferScope['connection'], call: 1 };
}

function frameOf(count: number): IncomingTensors {
  const receives = vi.fn(() => Promise.resolve({ senderTag: 0n, length: 1 }));
  const incoming = new IncomingTensors(scopeOf(receives), { maxTensor: 1 << 20 }, { side: 'server', label: 'test.', dialOwner: undefined as never });
  for (let x = 0; x < count; x++) {
    const wire: TensorWire = { dt: 'u8', sh: [1], n: 1, mt: 'host', m: 't', x };
    incoming.pending.push(new PendingTensor(wire, `xs[${x}]`, { kind: 'any' } as never));
  }
  return incoming;
}

describe('a frame of many tensors', () => {
  it(`is taken ${RECEIVE_SLICE} tensors a turn, every one received in its place`, async () => {
    const count = 4 * RECEIVE_SLICE + 3;
    const incoming = frameOf(count);
    const turns = turnCounter();
    const perTurn = new Map<number, number>();
    const received = await incoming.receive(() => {
      perTurn.set(turns.turn, (perTurn.get(turns.turn) ?? 0) + 1);
      return Tensor.zeros([1], 'u8');
    });
    turns.stop();
    expect(received.size).toBe(count);
    expect(incoming.pending.every((pending) => received.get(pending) instanceof Tensor)).toBe(true);
    // Five slices, in five different turns, none larger than a slice.
    expect([...perTurn.values()]).toEqual([RECEIVE_SLICE, RECEIVE_SLICE, RECEIVE_SLICE, RECEIVE_SLICE, 3]);
    incoming.releaseAll();
  });

  it('a frame within one slice takes no turn of its own', async () => {
    const incoming = frameOf(RECEIVE_SLICE);
    const turns = turnCounter();
    const seen = new Set<number>();
    await incoming.receive(() => {
      seen.add(turns.turn);
      return Tensor.zeros([1], 'u8');
    });
    turns.stop();
    expect(seen.size).toBe(1);
    incoming.releaseAll();
  });

  it('a failure stops the slices: the rest is refused without allocating, what was allocated goes back', async () => {
    const incoming = frameOf(4 * RECEIVE_SLICE);
    const allocated: Tensor[] = [];
    const failure = incoming.receive(() => {
      if (allocated.length === RECEIVE_SLICE + 10) throw new GdrpcError(Code.RESOURCE_EXHAUSTED, 'pool is full');
      const tensor = Tensor.zeros([1], 'u8');
      allocated.push(tensor);
      return tensor;
    });
    await expect(failure).rejects.toMatchObject({ code: Code.RESOURCE_EXHAUSTED });
    // The second slice's later tensors saw the failure and asked for nothing.
    expect(allocated.length).toBe(RECEIVE_SLICE + 10);
    expect(allocated.every((tensor) => tensor.released)).toBe(true);
  });
});
