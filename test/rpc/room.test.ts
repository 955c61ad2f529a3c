// The connection's room (core/rpc/connection/room.ts) on its own: calls wait in order while the
// link has no room, one goes a turn, a call's own end takes it out of line, the connection's end
// fails them all, and a pressed runtime's easing lets them go.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { Code, GdrpcError } from '../../core/errors.ts';
import { CallScope } from '../../core/rpc/call/deadline.ts';
import { Room } from '../../core/rpc/connection/room.ts';
import { WaitingLedger } from '../../core/rpc/runtime/waiting.ts';

/** A room over a link whose room and pressure the test sets. */
function roomOver(ledger?: WaitingLedger): { room: Room; link: { free: boolean; told: number[] } } {
  const link = { free: true, told: [] as number[] };
  const room = new Room({
    free: () => link.free,
    watchRuntime: (r) => { if (ledger?.pressed === true) ledger.watch(r); },
    held: () => {},
    holding: () => { link.told.push(room.heldBytes); },
  });
  return { room, link };
}

/** Calls `n` turns of the event loop. */
async function turns(n: number): Promise<void> {
  for (let i = 0; i < n; i += 1) await nextTurn();
}

describe('Room', () => {
  it('is crowded while the link has no room or calls wait; calls then go in order, one a turn', async () => {
    const { room, link } = roomOver();
    expect(room.crowded).toBe(false);
    link.free = false;
    expect(room.crowded).toBe(true);
    const went: number[] = [];
    const waits = [0, 1, 2].map((i) => room.wait(new CallScope(undefined)).then(() => { went.push(i); }));
    await turns(3);
    expect(went).toEqual([]);
    expect(room.waiting).toBe(3);
    link.free = true;
    // Free again, but calls wait: a new one goes behind them.
    expect(room.crowded).toBe(true);
    room.changed();
    await nextTurn();
    expect(went).toEqual([0]);
    // No room again after the first went (what it made filled the backlog): the rest wait.
    link.free = false;
    await turns(3);
    expect(went).toEqual([0]);
    link.free = true;
    room.changed();
    await Promise.all(waits);
    expect(went).toEqual([0, 1, 2]);
    expect(room.crowded).toBe(false);
  });

  it("a waiting call whose deadline passes or that is cancelled fails with its own error and leaves the line", async () => {
    const { room, link } = roomOver();
    link.free = false;
    const timed = new CallScope(Date.now() + 50);
    const cancelled = new CallScope(undefined);
    const last = new CallScope(undefined);
    const outcomes = [timed, cancelled, last].map((scope) => room.wait(scope).then(() => 'went', (e: GdrpcError) => e.code));
    cancelled.abort(new GdrpcError(Code.CANCELLED, 'cancelled by the caller'));
    expect(await outcomes[1]).toBe(Code.CANCELLED);
    expect(await outcomes[0]).toBe(Code.DEADLINE_EXCEEDED);
    expect(room.waiting).toBe(1);
    link.free = true;
    room.changed();
    expect(await outcomes[2]).toBe('went');
    expect(room.waiting).toBe(0);
  });

  it("the connection's end fails every waiting call with its error, and every later wait", async () => {
    const { room, link } = roomOver();
    link.free = false;
    const waits = [1, 2].map(() => room.wait(new CallScope(undefined)).catch((e: GdrpcError) => e));
    const closed = new GdrpcError(Code.UNAVAILABLE, 'connection closed', { details: { unprocessed: true } });
    room.close(closed);
    expect(await Promise.all(waits)).toEqual([closed, closed]);
    expect(room.crowded).toBe(true);
    await expect(room.wait(new CallScope(undefined))).rejects.toBe(closed);
  });

  it('while the runtime is pressed, a call waits until its waiting messages ease, told by the ledger', async () => {
    const ledger = new WaitingLedger(1000);
    const holder = { shed: () => { throw new Error('not past the limit: nothing is shed'); } };
    const { room, link } = roomOver(ledger);
    ledger.set(holder, 600);
    expect(ledger.pressed).toBe(true);
    link.free = false;
    let went = false;
    const wait = room.wait(new CallScope(undefined)).then(() => { went = true; });
    await turns(3);
    // The connection would have room now, but nobody told the room: it is the ledger's easing
    // that does.
    link.free = true;
    await turns(3);
    expect(went).toBe(false);
    ledger.set(holder, 400);
    expect(ledger.pressed).toBe(false);
    await wait;
    expect(went).toBe(true);
  });
});

describe('Room, against a peer that cancels', () => {
  it('calls cancelled behind one that waits do not stay in line: a thousand of them keep fewer than 130', async () => {
    const { room, link } = roomOver();
    link.free = false;
    const head = room.wait(new CallScope(undefined));
    for (let i = 0; i < 1000; i += 1) {
      const scope = new CallScope(undefined);
      const waiting = room.wait(scope).catch((e: GdrpcError) => e.code);
      scope.abort(new GdrpcError(Code.CANCELLED, 'cancelled by the peer'));
      expect(await waiting).toBe(Code.CANCELLED);
    }
    expect(room.waiting).toBe(1);
    expect(room.kept).toBeLessThan(130);
    link.free = true;
    room.changed();
    await head;
    expect(room.kept).toBe(0);
  });

  it("a closed connection's room is no longer told by the ledger", () => {
    const ledger = new WaitingLedger(1000);
    const holder = { shed: () => {} };
    let told = 0;
    const room = { changed: () => { told += 1; } };
    ledger.set(holder, 600);
    ledger.watch(room);
    ledger.unwatch(room);
    ledger.set(holder, 0);
    expect(told).toBe(0);
  });
});

describe('Room, what waiting calls hold', () => {
  it('counts the weight of each call while it waits, and lets it go when the call goes, ends or the room closes', async () => {
    const { room, link } = roomOver();
    link.free = false;
    const first = room.enter(new CallScope(undefined), () => 1000)!;
    const cancelled = new CallScope(undefined);
    const second = room.enter(cancelled, () => 500)!.catch((e: GdrpcError) => e.code);
    const third = room.enter(new CallScope(undefined), () => 250)!.catch((e: GdrpcError) => e.code);
    expect(room.heldBytes).toBe(1750);
    cancelled.abort(new GdrpcError(Code.CANCELLED, 'cancelled by the peer'));
    expect(await second).toBe(Code.CANCELLED);
    expect(room.heldBytes).toBe(1250);
    link.free = true;
    room.changed();
    await first;
    expect(room.heldBytes).toBe(250);
    link.free = false;
    room.close(new GdrpcError(Code.UNAVAILABLE, 'connection closed'));
    expect(await third).toBe(Code.UNAVAILABLE);
    expect(room.heldBytes).toBe(0);
    // The link was told at every change, in order.
    expect(link.told).toEqual([1000, 1500, 1750, 1250, 250, 0]);
  });

  it('drops waiting answers, the latest first, until they let go of what was asked', async () => {
    const { room, link } = roomOver();
    link.free = false;
    const scopes = [100, 200, 300].map(() => new CallScope(undefined));
    const waits = [100, 200, 300].map((bytes, i) => room.enter(scopes[i]!, () => bytes)!.then(() => 'went', (e: GdrpcError) => e.code));
    room.dropHeld(new GdrpcError(Code.RESOURCE_EXHAUSTED, 'over the limit'), 250);
    expect(room.heldBytes).toBe(300);
    expect(await waits[2]).toBe(Code.RESOURCE_EXHAUSTED);
    room.dropHeld(new GdrpcError(Code.RESOURCE_EXHAUSTED, 'over the limit'));
    expect(room.heldBytes).toBe(0);
    expect(await Promise.all(waits.slice(0, 2))).toEqual([Code.RESOURCE_EXHAUSTED, Code.RESOURCE_EXHAUSTED]);
  });

  it('weighs a call only when it must wait', () => {
    const { room } = roomOver();
    let weighed = 0;
    expect(room.enter(new CallScope(undefined), () => { weighed += 1; return 10; })).toBeUndefined();
    expect(weighed).toBe(0);
    expect(room.heldBytes).toBe(0);
  });
});
