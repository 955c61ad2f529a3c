// The tensors of one frame are allocated and their receives posted RECEIVE_SLICE at a time, each
// slice in its own turn of the event loop (core/rpc/transfer/transfer.ts): a frame may announce
// 16,384 tensors, and taking them all in one turn held the server's event loop 0.27-0.34 s on the
// CPU box (scratch: one frame of 16,384 1-byte host tensors), every other connection waiting; one
// of 16 gathers of 1,024 members 0.14 s. A gather counts as its members.
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
    runtime: {
      worker: { tagRecv: receives, tagRecvTaken: receives }, describes: false, hostStagingForTests: false,
      // A gather's copy out of its staging tensor (nothing to check here: the bytes are not looked at).
      blocks: { copy: () => Promise.resolve() },
    },
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
    reports: { forget: () => {}, reading: <T>(report: string, read: (report: string) => T) => read(report) },
  };
  return { connection: connection as unknown as TransferScope['connection'], call: 1 };
}

/** A frame of `count` separate 1-byte tag tensors, then `gathers` gathered transfers of `members`
 *  1-byte tensors each; every receive completes with its buffer's length. */
function frameOf(count: number, gathers = 0, members = 0): IncomingTensors {
  const receives = vi.fn((buffer: Uint8Array) => Promise.resolve({ senderTag: 0n, length: buffer.byteLength }));
  const incoming = new IncomingTensors(scopeOf(receives), { maxTensor: 1 << 20 }, { side: 'server', label: 'test.', dialOwner: undefined as never });
  const add = (wire: TensorWire, where: string): void => { incoming.pending.push(new PendingTensor(wire, where, { kind: 'any' } as never)); };
  for (let x = 0; x < count; x++) add({ dt: 'u8', sh: [1], n: 1, mt: 'host', m: 't', x }, `xs[${x}]`);
  for (let g = 0; g < gathers; g++) {
    for (let k = 0; k < members; k++) add({ dt: 'u8', sh: [1], n: 1, mt: 'host', m: 'g', x: 100_000 + g, f: k }, `gs[${g}][${k}]`);
  }
  return incoming;
}

/** Receives `incoming`, counting its allocations by turn of the event loop. */
async function receivedByTurn(incoming: IncomingTensors): Promise<{ received: Map<PendingTensor, Tensor>; perTurn: number[] }> {
  const turns = turnCounter();
  const perTurn = new Map<number, number>();
  try {
    const received = await incoming.receive(() => {
      perTurn.set(turns.turn, (perTurn.get(turns.turn) ?? 0) + 1);
      return Tensor.zeros([1], 'u8');
    });
    return { received, perTurn: [...perTurn.values()] };
  } finally {
    turns.stop();
  }
}

describe('a frame of many tensors', () => {
  it(`is taken ${RECEIVE_SLICE} tensors a turn, every one received in its place`, async () => {
    const count = 4 * RECEIVE_SLICE + 3;
    const incoming = frameOf(count);
    const { received, perTurn } = await receivedByTurn(incoming);
    expect(received.size).toBe(count);
    expect(incoming.pending.every((pending) => received.get(pending) instanceof Tensor)).toBe(true);
    // Five slices, in five different turns, none larger than a slice.
    expect(perTurn).toEqual([RECEIVE_SLICE, RECEIVE_SLICE, RECEIVE_SLICE, RECEIVE_SLICE, 3]);
    incoming.releaseAll();
  });

  it('a gather counts its members: three of 200 take three turns, and separate tensors fill the last one', async () => {
    const gathered = frameOf(0, 3, 200);
    const first = await receivedByTurn(gathered);
    expect(first.perTurn).toEqual([200, 200, 200]);
    expect(first.received.size).toBe(600);
    gathered.releaseAll();
    // 200 gathered, then 56 separate in the same turn (256), the other 44 in the next.
    const mixed = frameOf(100, 1, 200);
    const second = await receivedByTurn(mixed);
    expect(second.perTurn).toEqual([256, 44]);
    expect(mixed.pending.every((pending) => second.received.get(pending) instanceof Tensor)).toBe(true);
    mixed.releaseAll();
  });

  it('a frame within one slice takes no turn of its own', async () => {
    const incoming = frameOf(RECEIVE_SLICE);
    expect((await receivedByTurn(incoming)).perTurn).toEqual([RECEIVE_SLICE]);
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
