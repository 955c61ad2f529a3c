// The message window's two halves without a network (docs/wire.md "Message window"): the
// receiver's count (core/rpc/connection/window.ts) and the sender's outbox waiting for credit
// (core/rpc/connection/outbox.ts).
import { afterEach, describe, expect, it, vi } from 'vitest';
import { MessageWindow, MIN_CREDIT_BYTES, ReceiveWindow, type WindowLink } from '../../core/rpc/connection/window.ts';
import { FRAME_WEIGHT_BYTES, MAX_WINDOW_MESSAGE_BYTES, messageWeight, onlyWindowFrames, windowFrameBody } from '../../core/rpc/connection/window-frames.ts';
import { GdrpcError } from '../../core/errors.ts';
import { decodeFrame, encodeFrame } from '../../core/wire/codec.ts';
import { FrameKind } from '../../core/wire/frames.ts';
import { FRAME_HELD_BYTES, FREE_FLIGHT_BYTES, MAX_BLOCKED_BYTES, Outbox, PROGRESS_BYTES, type OutboxLink } from '../../core/rpc/connection/outbox.ts';
import { DEFAULT_MAX_WAITING_BYTES, WaitingLedger, type WaitingHolder } from '../../core/rpc/runtime/waiting.ts';
import { Runtime } from '../../core/index.ts';
import { FRAME_HEADER, packMessage, unpackMessage } from '../../core/wire/message.ts';

const KiB = 1024;

describe('receive window', () => {
  it('takes the window, then refuses a byte more', () => {
    const window = new ReceiveWindow(64 * KiB, 16 * KiB);
    expect(window.arrived(64 * KiB, true)).toBe(true);
    expect(window.arrived(1, true)).toBe(false);
  });

  it('before admission the limit is the handshake allowance', () => {
    const window = new ReceiveWindow(64 * KiB, 16 * KiB);
    expect(window.limit(false)).toBe(16 * KiB);
    expect(window.arrived(16 * KiB, false)).toBe(true);
    expect(window.arrived(1, false)).toBe(false);
  });

  it('reading gives a credit per quarter window; only its acknowledgment moves the limit', () => {
    const window = new ReceiveWindow(64 * KiB, 16 * KiB);
    expect(window.read(16 * KiB - 1)).toBeUndefined();
    const credit = window.read(1)!;
    expect(credit.n).toBe(16 * KiB);
    expect(Number.isInteger(credit.id) && credit.id >= 0 && credit.id < 2 ** 32).toBe(true);
    // Read and credited, not acknowledged: the peer may not have it yet.
    expect(window.limit(true)).toBe(64 * KiB);
    expect(window.ack(credit.id)).toEqual(credit);
    expect(window.limit(true)).toBe(80 * KiB);
    expect(window.ack(credit.id)).toBeUndefined();  // once only
  });

  it('acknowledgments come in the order the credits were given, each with its own id', () => {
    const window = new ReceiveWindow(64 * KiB, 16 * KiB);
    const first = window.read(16 * KiB)!;
    const second = window.read(16 * KiB)!;
    expect(second.id).not.toBe(first.id);
    expect(window.ack(second.id)).toBeUndefined();
    expect(window.ack(first.id + 1 === second.id ? first.id + 2 : first.id + 1)).toBeUndefined();
    expect(window.ack(first.id)).toEqual(first);
    expect(window.ack(second.id)).toEqual(second);
  });

  it("widening (a server's at admission, before READY says so) adds the difference to the limit and spaces credits by the new quarter; it never narrows", () => {
    const window = new ReceiveWindow(64 * KiB, 16 * KiB);
    window.widen(256 * KiB);
    expect(window.size).toBe(256 * KiB);
    expect(window.limit(true)).toBe(256 * KiB);
    expect(window.limit(false)).toBe(16 * KiB);
    window.widen(128 * KiB);
    expect(window.size).toBe(256 * KiB);
    expect(window.arrived(256 * KiB, true)).toBe(true);
    expect(window.read(63 * KiB)).toBeUndefined();
    expect(window.read(KiB)?.n).toBe(64 * KiB);
    expect(window.arrived(1, true)).toBe(false);
  });

  it('a peer that sends ahead of its credits is found out by the bytes alone, whatever it echoes', () => {
    // What a flood looks like from here: the reader has read everything before each message, and
    // credits for all of it went out, but the peer acknowledged none.
    const window = new ReceiveWindow(64 * KiB, 16 * KiB);
    let refusedAt = -1;
    for (let i = 0; i < 100 && refusedAt < 0; i += 1) {
      if (!window.arrived(4 * KiB, true)) refusedAt = i;
      else window.read(4 * KiB);
    }
    expect(refusedAt).toBe(16);
  });

});

/** An outbox whose delivered messages are kept (as lists of calls), with its overflow calls. */
/** How long the recording link lets its peer take nothing while more than MAX_BLOCKED_BYTES wait. */
const STALL_MS = 10_000;

function recording(): { outbox: Outbox; delivered: number[][]; overflows: Array<[number, number, number]>; waiting: number[]; closeLink(): void } {
  const delivered: number[][] = [];
  const overflows: Array<[number, number, number]> = [];
  const waiting: number[] = [];
  let refusal: unknown;
  const link: OutboxLink = {
    maxFrame: () => Number.MAX_SAFE_INTEGER,
    refusal: () => refusal,
    deliver: (message) => {
      delivered.push(unpackMessage(message).map((f) => f.call));
      return undefined;
    },
    overflow: (bytes, frames, idleMs) => { overflows.push([bytes, frames, idleMs]); },
    stallMs: () => STALL_MS,
    waiting: (held) => { waiting.push(held); },
  };
  return { outbox: new Outbox(link), delivered, overflows, waiting, closeLink: () => { refusal = new Error('closed'); } };
}

const frame = (n: number): Uint8Array => new Uint8Array(n);
/** What a message of one frame of `n` body bytes weighs in the window. */
const one = (n: number): number => FRAME_HEADER + n + FRAME_WEIGHT_BYTES;
/** Lets queued microtasks run (the end-of-turn flush among them). */
const turn = async (): Promise<void> => { for (let i = 0; i < 5; i += 1) await Promise.resolve(); };

/** A MessageWindow over a link that records what it sends, grants and refuses. */
function windowed(sent = 1 << 20): { window: MessageWindow; frames: Array<[number, unknown]>; grants: number[]; refused: GdrpcError[] } {
  const frames: Array<[number, unknown]> = [];
  const grants: number[] = [];
  const refused: GdrpcError[] = [];
  const link: WindowLink = {
    peer: 'peer', admitted: true,
    refuse: (error) => { refused.push(error); },
    sendWindowFrame: (kind, body) => { frames.push([kind, body]); },
    sentBytes: () => sent,
    grant: (n) => { grants.push(n); },
    shortfall: () => 0,
    borrow: () => {},
    loanAckMs: 60_000,
    messageWaiting: () => false,
  };
  return { window: new MessageWindow(64 * KiB, 64 * KiB, 16 * KiB, link), frames, grants, refused };
}

describe('message window', () => {
  it('a credit from the peer is acknowledged first, then granted', () => {
    const { window, frames, grants } = windowed();
    expect(window.credit(20 * KiB, 5)).toBeUndefined();
    expect(frames).toEqual([[FrameKind.Ack, { id: 5 }]]);
    expect(grants).toEqual([20 * KiB]);
  });

  it.each([
    ['without an id', 20 * KiB, undefined, /without an id/],
    ['under the smallest credit', MIN_CREDIT_BYTES - 1, 1, /at least 16384 a credit/],
    ['for more than this side sent', 40 * KiB, 1, /for 32768 bytes sent/],
  ])('a credit %s is refused, and nothing is acknowledged or granted', (_what, n, id, message) => {
    const { window, frames, grants } = (() => windowed(32 * KiB))();
    expect(window.credit(n, id)?.message).toMatch(message);
    expect(frames).toEqual([]);
    expect(grants).toEqual([]);
  });

  it('credits add up against what this side sent', () => {
    const { window } = windowed(40 * KiB);
    expect(window.credit(20 * KiB, 1)).toBeUndefined();
    expect(window.credit(20 * KiB, 2)).toBeUndefined();
    expect(window.credit(MIN_CREDIT_BYTES, 3)?.message).toMatch(/with 40960 credited before/);
  });

  it('reading a quarter window sends a CREDIT; a peer past the window is refused once, and nothing after is counted', () => {
    const { window, frames, refused } = windowed();
    expect(window.arrived(16 * KiB)).toBe(true);
    window.read(16 * KiB);
    expect(frames).toHaveLength(1);
    expect(frames[0]![0]).toBe(FrameKind.Credit);
    expect(window.arrived(48 * KiB)).toBe(true);
    expect(window.arrived(1)).toBe(false);
    expect(refused.map((e) => e.message)).toEqual([expect.stringMatching(/sent 1 bytes of messages past its window \(65536 bytes, the credits it acknowledged and the loans it used/)]);
    expect(window.overrun).toBe(true);
    expect(window.arrived(1)).toBe(false);
    expect(refused).toHaveLength(1);
  });

  it('an ACK must echo the oldest credit given', () => {
    const { window, frames } = windowed();
    window.read(16 * KiB);
    const { id } = frames[0]![1] as { id: number };
    expect(window.ack(id + 1)?.message).toMatch(/not the oldest/);
    expect(window.ack(id)).toBeUndefined();
  });

  it('a message weighs its bytes and 1 KiB a frame, read from its frame headers', () => {
    const frames = (n: number, size: number) => Array.from({ length: n }, (_, i) => ({ kind: FrameKind.Keepalive, call: i, body: new Uint8Array(size) }));
    for (const [n, size] of [[1, 0], [1, 5000], [16, 3], [256, 0]] as const) {
      const m = packMessage(frames(n, size));
      expect(messageWeight(m, m.length)).toBe(m.length + n * FRAME_WEIGHT_BYTES);
    }
    const cut = packMessage(frames(2, 10));
    expect(messageWeight(cut, cut.length - 3)).toBe(cut.length - 3 + 2 * FRAME_WEIGHT_BYTES);
    expect(messageWeight(cut, 0)).toBe(FRAME_WEIGHT_BYTES);
  });

  it.each([
    [FrameKind.Credit, { n: 16 * KiB, id: 0 }],
    [FrameKind.Credit, { n: 2 ** 32 + 5, id: 2 ** 30 - 1 }],
    [FrameKind.Credit, { n: 3 << 20, id: 77, loan: true }],
    [FrameKind.Ack, { id: 123_456 }],
    [FrameKind.Ack, { id: 9, no: true }],
    [FrameKind.Want, { n: 5 << 20 }],
  ] as const)('the hand-written body of kind %i decodes through the frame table to what was written: %o', (kind, body) => {
    const bytes = windowFrameBody(body);
    const frame = decodeFrame({ kind, call: 0, source: bytes, start: 0, end: bytes.length });
    expect(frame.body).toEqual({ ...body, v: 2 });
    expect(bytes.length).toBeLessThanOrEqual(MAX_WINDOW_MESSAGE_BYTES);
  });

  it('a message of window frames alone is told apart by its frame headers', () => {
    const credit = { kind: FrameKind.Credit, call: 0, body: encodeFrame(FrameKind.Credit, { n: 1 << 20, id: 7 }) };
    const ack = { kind: FrameKind.Ack, call: 0, body: encodeFrame(FrameKind.Ack, { id: 7 }) };
    const keepalive = { kind: FrameKind.Keepalive, call: 0, body: encodeFrame(FrameKind.Keepalive, {}) };
    const streamCredit = { kind: FrameKind.Credit, call: 3, body: encodeFrame(FrameKind.Credit, { n: 32 }) };
    const is = (frames: Parameters<typeof packMessage>[0]): boolean => { const m = packMessage(frames); return onlyWindowFrames(m, m.length); };
    expect(is([credit])).toBe(true);
    expect(is([ack])).toBe(true);
    expect(is([ack, credit])).toBe(true);
    expect(packMessage([ack, credit]).length).toBeLessThanOrEqual(MAX_WINDOW_MESSAGE_BYTES);
    expect(is([keepalive])).toBe(false);
    expect(is([ack, keepalive])).toBe(false);
    expect(is([streamCredit])).toBe(false);
    // An ACK is the window's on call 0 only: on a call it is counted like any frame (and refused).
    expect(is([{ ...ack, call: 1000 }])).toBe(false);
    const cut = packMessage([ack]);
    expect(onlyWindowFrames(cut, cut.length - 1)).toBe(false);
    expect(onlyWindowFrames(cut, 0)).toBe(false);
  });
});

describe('outbox and the peer window', () => {
  it('without a window from the peer nothing waits', async () => {
    const { outbox, delivered } = recording();
    await Promise.all(Array.from({ length: 40 }, (_, i) => outbox.send(4, i + 1, frame(4000))));
    expect(delivered.flat()).toHaveLength(40);
    expect(outbox.blockedBytes).toBe(0);
  });

  it('messages past the window wait, in order, and leave as credit comes; what was sent before the window counts', async () => {
    const { outbox, delivered } = recording();
    await outbox.send(4, 1, frame(100));  // before the peer's window was known (a handshake frame)
    outbox.openWindow(one(100) + 2 * one(1000));
    const told: number[] = [];
    for (const call of [2, 3, 4, 5]) {
      void outbox.send(4, call, frame(1000)).then(() => told.push(call));
      await turn();  // one message per turn
    }
    expect(delivered).toEqual([[1], [2], [3]]);
    expect(told).toEqual([2, 3]);
    expect(outbox.blockedBytes).toBe(2 * (FRAME_HEADER + 1000));
    outbox.grant(one(1000) - 1);  // not enough for the next: nothing overtakes it
    void outbox.send(4, 6, frame(1));
    await turn();
    expect(delivered).toEqual([[1], [2], [3]]);
    outbox.grant(1);
    await turn();
    expect(delivered).toEqual([[1], [2], [3], [4]]);
    expect(told).toEqual([2, 3, 4]);
    outbox.grant(10 * one(1000));
    await turn();
    expect(delivered).toEqual([[1], [2], [3], [4], [5], [6]]);
    expect(told).toEqual([2, 3, 4, 5]);
    expect(outbox.blockedBytes).toBe(0);
  });

  it("the peer's window widened (READY's `win`): the difference is room at once, and a narrower one changes nothing", async () => {
    const { outbox, delivered } = recording();
    outbox.openWindow(2 * one(1000));
    for (const call of [1, 2, 3, 4]) {
      void outbox.send(4, call, frame(1000));
      await turn();
    }
    expect(delivered).toEqual([[1], [2]]);
    outbox.widenWindow(one(1000));
    await turn();
    expect(delivered).toEqual([[1], [2]]);
    outbox.widenWindow(4 * one(1000));
    await turn();
    expect(delivered).toEqual([[1], [2], [3], [4]]);
    expect(outbox.blockedBytes).toBe(0);
  });

  it('a message the peer sent outside the outbox (HELLO) counts against the window too', async () => {
    const { outbox, delivered } = recording();
    outbox.sentOutside(50);
    outbox.openWindow(50 + one(10));
    await outbox.send(4, 1, frame(10));
    void outbox.send(4, 2, frame(10));
    await turn();
    expect(delivered).toEqual([[1]]);
    expect(outbox.blockedBytes).toBe(FRAME_HEADER + 10);
  });

  describe(`past ${MAX_BLOCKED_BYTES} bytes waiting (messages, and ${FRAME_HELD_BYTES} a frame)`, () => {
    afterEach(() => { vi.useRealTimers(); });
    const MiB = 1 << 20;
    /** Queues `count` messages of one 1 MiB frame each, a turn apart. */
    async function queueMiB(outbox: Outbox, count: number, first = 1): Promise<void> {
      for (let i = 0; i < count; i += 1) {
        void outbox.send(4, first + i, frame(MiB - FRAME_HEADER)).catch(() => {});
        await turn();
      }
    }

    it(`the link is told once the oldest waiting message has waited the stall time (${STALL_MS} ms), not before`, async () => {
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
      const { outbox, overflows } = recording();
      outbox.openWindow(64 * KiB);
      // Messages of one frame of 1 MiB: 31 stay under the cap, the 32nd passes it.
      await queueMiB(outbox, 31);
      vi.advanceTimersByTime(2 * STALL_MS);
      expect(overflows).toEqual([]);
      await queueMiB(outbox, 1, 999);
      // The clock started when the first message began to wait: it ran out already.
      vi.advanceTimersByTime(1);
      expect(overflows).toEqual([[32 * MiB, 32, 2 * STALL_MS + 1]]);
    });

    it('a peer that takes some now and then is told once the oldest waiting message has waited the stall time', async () => {
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
      const { outbox, overflows, delivered } = recording();
      outbox.openWindow(0);
      await queueMiB(outbox, 64);
      // A MiB (one message) every half stall time: the messages queued first still wait.
      vi.advanceTimersByTime(STALL_MS / 2);
      outbox.grant(MiB + 64 * KiB);
      vi.advanceTimersByTime(STALL_MS / 2 - 1);
      outbox.grant(MiB + 64 * KiB);
      expect(overflows).toEqual([]);
      vi.advanceTimersByTime(1);
      expect(delivered.length).toBe(2);
      expect(overflows).toEqual([[62 * MiB, 62, STALL_MS]]);
    });

    it('a peer that takes everything made for it within the stall time is never told, however much waits at once', async () => {
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
      const { outbox, overflows, delivered } = recording();
      outbox.openWindow(0);
      let call = 1;
      for (let step = 0; step < 10; step += 1) {
        // 40 MiB more each step, the step before's taken whole a moment before the stall time.
        await queueMiB(outbox, 40, call);
        call += 40;
        vi.advanceTimersByTime(STALL_MS - 1);
        outbox.grant(40 * (MiB + KiB));
      }
      expect(delivered.length).toBe(400);
      expect(overflows).toEqual([]);
      vi.advanceTimersByTime(STALL_MS);
      expect(overflows).toEqual([]);
    });

    it('credit that brings it under the cap ends the watch', async () => {
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
      const { outbox, overflows } = recording();
      outbox.openWindow(0);
      await queueMiB(outbox, 40);
      outbox.grant(16 * MiB);  // 16 go: 24 MiB wait
      vi.advanceTimersByTime(10 * STALL_MS);
      expect(overflows).toEqual([]);
    });

    it('small frames count for what they hold, not only their bytes: thousands of them pass the cap far below 32 MiB of messages', async () => {
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
      const { outbox, overflows } = recording();
      outbox.openWindow(0);  // all of it waits
      const limit = Math.ceil(MAX_BLOCKED_BYTES / FRAME_HELD_BYTES);
      for (let turnNo = 0; turnNo * 16 <= limit; turnNo += 1) {
        for (let i = 0; i < 16; i += 1) void outbox.send(4, turnNo * 16 + i + 1, frame(1)).catch(() => {});
        await turn();
      }
      vi.advanceTimersByTime(STALL_MS);
      expect(overflows.length).toBe(1);
      const [bytes, frames] = overflows[0]!;
      expect(frames).toBeGreaterThan(limit - 32);
      expect(frames).toBeLessThanOrEqual(limit + 16);
      expect(bytes).toBeLessThan(1 << 20);
    });

    it('a stall time run out while this process was blocked gives the peer an eighth of it more, to read its credit', async () => {
      // Real timers: the event loop is blocked for real, for four times the stall time.
      const stallMs = 100;
      const overflows: number[] = [];
      const outbox = new Outbox({
        maxFrame: () => Number.MAX_SAFE_INTEGER, refusal: () => undefined, deliver: () => undefined,
        overflow: (bytes) => { overflows.push(bytes); }, stallMs: () => stallMs,
      });
      outbox.openWindow(0);
      await queueMiB(outbox, 40);
      const until = performance.now() + 4 * stallMs;
      while (performance.now() < until) { /* this process is busy */ }
      // The peer's credit came meanwhile; it is read after the stall timer ran out (a timer due
      // later: timers run in the order they are due).
      setTimeout(() => outbox.grant(16 * MiB), 1);
      await new Promise((resolve) => setTimeout(resolve, 3 * stallMs));
      expect(overflows).toEqual([]);
      outbox.close();
    });

    it('closing the outbox stops the watch', async () => {
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
      const { outbox, overflows, closeLink } = recording();
      outbox.openWindow(0);
      await queueMiB(outbox, 40);
      closeLink();
      outbox.close();
      vi.advanceTimersByTime(10 * STALL_MS);
      expect(overflows).toEqual([]);
    });
  });

  it("the waiting messages' frames fail with the link's refusal when it closes, and nothing more is delivered", async () => {
    const { outbox, delivered, closeLink } = recording();
    outbox.openWindow(0);
    const waiting = outbox.send(4, 1, frame(10));
    await turn();
    closeLink();
    outbox.close();
    await expect(waiting).rejects.toThrow('closed');
    outbox.grant(1000);
    expect(delivered).toEqual([]);
    expect(outbox.blockedBytes).toBe(0);
  });
});

describe("the runtime's count of what waits for peers' windows", () => {
  /** A holder that records being shed and lets go of what it held, as a closing connection does. */
  function holder(ledger: WaitingLedger, name: string, shed: string[]): WaitingHolder {
    const self: WaitingHolder = {
      shed: (held, total, limit) => {
        shed.push(`${name} ${held}/${total}/${limit}`);
        ledger.set(self, 0);
      },
    };
    return self;
  }

  it('the outbox reports what waits as it changes (bytes and 4 KiB a frame), and nothing while the window is open', async () => {
    const { outbox, waiting } = recording();
    await outbox.send(4, 1, frame(10));
    expect(waiting).toEqual([]);  // no window from the peer: nothing waits
    outbox.openWindow(one(10) + one(100));
    await outbox.send(4, 2, frame(100));
    expect(waiting).toEqual([]);
    void outbox.send(4, 3, frame(100));
    void outbox.send(4, 4, frame(200)).catch(() => {});
    await turn();
    const held = FRAME_HEADER * 2 + 300 + 2 * FRAME_HELD_BYTES;
    expect(waiting).toEqual([held]);  // one message of two frames
    outbox.grant(10 * KiB);
    await turn();
    expect(waiting).toEqual([held, 0]);
    outbox.openWindow(0);
    void outbox.send(4, 5, frame(1)).catch(() => {});
    await turn();
    outbox.close();
    expect(waiting).toEqual([held, 0, FRAME_HEADER + 1 + FRAME_HELD_BYTES, 0]);
  });

  it('past the limit the holder whose peer has gone longest without taking any is shed, then the next, until the rest fits; below it nobody is', async () => {
    const ledger = new WaitingLedger(100);
    const shed: string[] = [];
    const [a, b, c] = ['a', 'b', 'c'].map((name) => holder(ledger, name, shed)) as [WaitingHolder, WaitingHolder, WaitingHolder];
    ledger.set(a, 30);
    ledger.set(b, 50);
    ledger.set(c, 20);
    await turn();
    expect(shed).toEqual([]);
    expect(ledger.total).toBe(100);
    ledger.set(a, 20, true);  // a's peer took some: a goes to the end of the order
    ledger.set(c, 50);  // 120: b began to hold before c and took nothing since; b goes, 70 left
    expect(shed).toEqual([]);  // not inside the caller's flush
    await turn();
    expect(shed).toEqual(['b 50/120/100']);
    expect(ledger.total).toBe(70);
    ledger.set(a, 90);  // a holds the most, but took something after c began: c (50) goes
    await turn();
    expect(shed).toEqual(['b 50/120/100', 'c 50/140/100']);
    expect(ledger.total).toBe(90);
    ledger.set(b, 70);  // b holds anew, at the end: a (90) goes, then 70 fits
    ledger.set(c, 10);
    await turn();
    expect(shed).toEqual(['b 50/120/100', 'c 50/140/100', 'a 90/170/100']);
    expect(ledger.total).toBe(80);
    ledger.set(b, 0);
    ledger.set(c, 0);
    expect(ledger.total).toBe(0);
  });

  it('a holder shed is told how long its peer took nothing', async () => {
    const ledger = new WaitingLedger(10);
    const idle: number[] = [];
    const self: WaitingHolder = { shed: (_held, _total, _limit, idleMs) => { idle.push(idleMs); ledger.set(self, 0); } };
    ledger.set(self, 5);
    await new Promise((resolve) => setTimeout(resolve, 30));
    ledger.set(self, 20);  // no progress: still counted from when it began to hold
    await turn();
    expect(idle).toHaveLength(1);
    expect(idle[0]).toBeGreaterThanOrEqual(25);
  });

  it(`messages in UCX's hands count past ${FREE_FLIGHT_BYTES} bytes until their sends complete; ${PROGRESS_BYTES} bytes taken is the peer taking some`, async () => {
    const sends: Array<() => void> = [];
    const reports: Array<[number, boolean]> = [];
    const outbox = new Outbox({
      maxFrame: () => Number.MAX_SAFE_INTEGER,
      refusal: () => undefined,
      deliver: () => new Promise<void>((resolve) => { sends.push(resolve); }),
      waiting: (held, progressed) => { reports.push([held, progressed]); },
    });
    outbox.openWindow(1 << 30);  // open: nothing waits for the window
    const MiB = 1 << 20;
    const first = outbox.send(4, 1, frame(5 * MiB));
    await turn();
    expect(reports).toEqual([]);  // 5 MiB in UCX's hands: within what a connection keeps uncounted
    const second = outbox.send(4, 2, frame(5 * MiB));
    await turn();
    expect(reports).toEqual([[2 * (5 * MiB + FRAME_HEADER) - FREE_FLIGHT_BYTES, false]]);
    sends[0]!();
    await first;
    expect(reports.at(-1)).toEqual([0, true]);  // 5 MiB taken: progress
    outbox.close();  // what is left in UCX's hands is the closing endpoint's
    sends[1]!();
    await second;
    expect(reports).toHaveLength(2);  // nothing counted after the close
  });

  it(`credit that lets a few small messages go is not progress until ${PROGRESS_BYTES} bytes of window weight were taken`, async () => {
    const reports: Array<[number, boolean]> = [];
    const outbox = new Outbox({
      maxFrame: () => Number.MAX_SAFE_INTEGER,
      refusal: () => undefined,
      deliver: () => undefined,
      waiting: (held, progressed) => { reports.push([held, progressed]); },
    });
    outbox.openWindow(0);
    for (let i = 0; i < 80; i += 1) {
      void outbox.send(4, i + 1, frame(16 * KiB - FRAME_HEADER - FRAME_WEIGHT_BYTES)).catch(() => {});
      await turn();  // one message each, of weight 16 KiB (its bytes and 1 KiB for its frame)
    }
    const weight = 16 * KiB;
    for (let i = 0; i < 63; i += 1) outbox.grant(weight);  // 63 messages of 16 KiB: not yet 1 MiB
    expect(reports.filter(([, progressed]) => progressed)).toEqual([]);
    outbox.grant(weight);  // the 64th: 1 MiB taken
    expect(reports.filter(([, progressed]) => progressed)).toHaveLength(1);
    outbox.close();
  });

  it('a message let go by credit counts once as taken, not again when its send completes', async () => {
    const reports: Array<[number, boolean]> = [];
    const sends: Array<() => void> = [];
    const outbox = new Outbox({
      maxFrame: () => Number.MAX_SAFE_INTEGER,
      refusal: () => undefined,
      deliver: () => new Promise<void>((resolve) => { sends.push(resolve); }),
      waiting: (held, progressed) => { reports.push([held, progressed]); },
    });
    outbox.openWindow(0);
    for (let i = 0; i < 40; i += 1) {
      void outbox.send(4, i + 1, frame(16 * KiB - FRAME_HEADER - FRAME_WEIGHT_BYTES)).catch(() => {});
      await turn();
    }
    // 33 messages of 16 KiB go on credit: 528 KiB, about half of PROGRESS_BYTES.
    outbox.grant(33 * 16 * KiB);
    expect(sends).toHaveLength(33);
    for (const sent of sends) sent();
    await turn();
    expect(reports.filter(([, progressed]) => progressed)).toEqual([]);
    outbox.close();
  });

  it('a holder shed is taken off even when it never says it let go, and is not shed twice', async () => {
    const ledger = new WaitingLedger(10);
    const shed: string[] = [];
    const silent: WaitingHolder = { shed: (held) => { shed.push(`silent ${held}`); } };
    ledger.set(silent, 8);
    ledger.set(holder(ledger, 'other', shed), 5);
    await turn();
    expect(shed).toEqual(['silent 8']);
    expect(ledger.total).toBe(5);
    ledger.set(silent, 0);  // told late: nothing left to take off
    expect(ledger.total).toBe(5);
  });

  it('RuntimeOptions.maxWaitingBytes is checked up front and sets the runtime\'s limit (256 MiB by default)', async () => {
    for (const value of [0, -1, 1.5, '1MiB', Number.NaN]) {
      expect(() => Runtime.create({ maxWaitingBytes: value as number })).toThrow(/INVALID_ARGUMENT.*maxWaitingBytes/);
    }
    const runtime = Runtime.create({ maxWaitingBytes: 1 << 20 });
    const plain = Runtime.create();
    try {
      expect([runtime.waiting.limit, runtime.waitingBytes]).toEqual([1 << 20, 0]);
      expect(plain.waiting.limit).toBe(DEFAULT_MAX_WAITING_BYTES);
      expect(DEFAULT_MAX_WAITING_BYTES).toBe(256 << 20);
    } finally {
      await Promise.all([runtime.close(), plain.close()]);
    }
  });
});

describe('loans of window (WANT, CREDIT with loan)', () => {
  /** A lender that records what comes back. */
  function lender(): { ask: (who: { lent(n: number): void }, n: number) => void; give: (n: number) => void; withdraw: () => void; back: number[] } {
    const back: number[] = [];
    return { ask: (who, n) => who.lent(n), give: (n) => { back.push(n); }, withdraw: () => {}, back };
  }

  it('a loan taken is spent by the next message: what it used is paid back by reading, what it left comes back at once', () => {
    const lent = lender();
    const window = new ReceiveWindow(64 * KiB, 16 * KiB, lent);
    expect(window.arrived(60 * KiB, true)).toBe(true);  // 4 KiB of room left
    const loan = window.lend(100 * KiB);
    expect(loan).toMatchObject({ n: 100 * KiB, loan: true });
    expect(window.outstanding).toBe(100 * KiB);
    expect(window.ack(loan.id)).toEqual(loan);
    // A 54 KiB message: 4 KiB of room, 50 KiB of the loan; the other 50 KiB come back now.
    expect(window.arrived(54 * KiB, true)).toBe(true);
    expect(lent.back).toEqual([50 * KiB]);
    expect(window.outstanding).toBe(50 * KiB);
    expect(window.limit(true)).toBe(114 * KiB);
    // Reading pays back the 50 KiB first: 60 + 54 KiB read credit 64 KiB, not 114.
    const credit = window.read(114 * KiB)!;
    expect(credit.n).toBe(64 * KiB);
    expect(lent.back).toEqual([50 * KiB, 50 * KiB]);
    expect(window.outstanding).toBe(0);
    // The next message has no loan: past the room it is refused.
    expect(window.ack(credit.id)).toEqual(credit);
    expect(window.arrived(64 * KiB, true)).toBe(true);
    expect(window.arrived(1, true)).toBe(false);
  });

  it('a loan the next message does not need is gone after it; one declined comes back at once', () => {
    const lent = lender();
    const window = new ReceiveWindow(64 * KiB, 16 * KiB, lent);
    const first = window.lend(32 * KiB);
    window.ack(first.id);
    expect(window.arrived(1 * KiB, true)).toBe(true);
    expect(lent.back).toEqual([32 * KiB]);
    expect(window.limit(true)).toBe(64 * KiB);
    const second = window.lend(32 * KiB);
    expect(window.ack(second.id, true)).toEqual(second);
    expect(lent.back).toEqual([32 * KiB, 32 * KiB]);
    expect(window.outstanding).toBe(0);
    // Only a loan may be declined.
    const credit = window.read(16 * KiB)!;
    expect(window.ack(credit.id, true)).toBeUndefined();
  });

  it('a message past the room and the loan together is refused', () => {
    const window = new ReceiveWindow(64 * KiB, 16 * KiB, lender());
    const loan = window.lend(10 * KiB);
    window.ack(loan.id);
    expect(window.arrived(74 * KiB + 1, true)).toBe(false);
  });

  /** A MessageWindow over a link and a lender that record what happens; `short` is what the
   *  outbox's first waiting message needs. */
  function lending(options: { short?: number; sent?: number } = {}) {
    const frames: Array<[number, Record<string, unknown>]> = [];
    const borrowed: number[] = [];
    const refused: GdrpcError[] = [];
    const asks: number[] = [];
    const back: number[] = [];
    let short = options.short ?? 0;
    const link: WindowLink = {
      peer: 'peer', admitted: true,
      refuse: (error) => { refused.push(error); },
      sendWindowFrame: (kind, body) => { frames.push([kind, body as Record<string, unknown>]); },
      sentBytes: () => options.sent ?? 1 << 20,
      grant: () => {},
      shortfall: () => short,
      borrow: (n) => { borrowed.push(n); short = 0; },
      loanAckMs: 50,
      messageWaiting: () => false,
    };
    let served: { lent(n: number): void } | undefined;
    const lender = { ask: (who: { lent(n: number): void }, n: number) => { asks.push(n); served = who; }, give: (n: number) => { back.push(n); }, withdraw: () => { served = undefined; } };
    const window = new MessageWindow(64 * KiB, 1 << 20, 16 * KiB, link, lender);
    return { window, frames, borrowed, refused, asks, back, serve: (n: number) => served?.lent(n), setShort: (n: number) => { short = n; } };
  }

  it("a sender WANTs once for a waiting message, once the peer lends; the loan is taken when it lets the message go", () => {
    const { window, frames, borrowed } = lending({ short: 200 * KiB });
    window.blocked();
    expect(frames).toEqual([]);  // the peer announced no wmax over its win: it lends nothing
    window.peerLends();
    window.blocked();
    window.blocked();
    expect(frames).toEqual([[FrameKind.Want, { n: 200 * KiB }]]);
    expect(window.credit(200 * KiB, 9, true)).toBeUndefined();
    expect(frames.slice(1)).toEqual([[FrameKind.Ack, { id: 9 }]]);
    expect(borrowed).toEqual([200 * KiB]);
  });

  it('a loan too small, or not needed any more, is declined; one nobody asked for is refused', () => {
    const { window, frames, borrowed, setShort } = lending({ short: 200 * KiB });
    window.peerLends();
    window.blocked();
    // Too small: declined, and wanted again.
    expect(window.credit(100 * KiB, 1, true)).toBeUndefined();
    expect(frames.slice(1)).toEqual([[FrameKind.Ack, { id: 1, no: true }], [FrameKind.Want, { n: 200 * KiB }]]);
    setShort(0);
    expect(window.credit(300 * KiB, 2, true)).toBeUndefined();
    expect(frames.slice(3)).toEqual([[FrameKind.Ack, { id: 2, no: true }]]);
    expect(borrowed).toEqual([]);
    expect(window.credit(300 * KiB, 3, true)?.message).toMatch(/a loan of 307200 bytes of window that no WANT asked for/);
  });

  it("the peer's WANT is lent from the lender, one at a time; the loan declined allows the next", () => {
    const { window, frames, refused, asks, serve } = lending();
    expect(window.want(0)?.message).toMatch(/a WANT of 0 bytes/);
    expect(window.want((1 << 20) + 1)?.message).toMatch(/from 1 to 1048576/);
    expect(window.want(300 * KiB)).toBeUndefined();
    expect(asks).toEqual([300 * KiB]);
    expect(window.want(300 * KiB)?.message).toMatch(/a WANT before the loan for the one before it was declined or used/);
    serve(300 * KiB);
    expect(frames).toEqual([[FrameKind.Credit, { n: 300 * KiB, id: expect.any(Number), loan: true }]]);
    expect(window.ack(frames[0]![1].id as number, true)).toBeUndefined();
    expect(window.want(10 * KiB)).toBeUndefined();
    expect(refused).toEqual([]);
  });

  it('a loan taken counts as the one WANT until a counted message used it; its timer runs until then; a WANT waiting for the lender excuses liveness', async () => {
    const { window, frames, refused, serve } = lending();
    expect(window.want(100 * KiB)).toBeUndefined();
    expect(window.peerWaitsForLoan).toBe(true);
    serve(100 * KiB);
    expect(window.peerWaitsForLoan).toBe(false);
    const { id } = frames[0]![1] as { id: number };
    expect(window.ack(id)).toBeUndefined();
    // Taken, not used: a second WANT is refused (the first loan would be dropped uncounted).
    expect(window.want(100 * KiB)?.message).toMatch(/declined or used/);
    expect(window.arrived(120 * KiB)).toBe(true);
    expect(window.want(100 * KiB)).toBeUndefined();
    // The first loan's timer ended with its use: nothing refused after its 50 ms.
    await new Promise((resolve) => setTimeout(resolve, 120));
    expect(refused).toEqual([]);
  });

  it('a loan taken and never used closes the connection once its timer runs out', async () => {
    const { window, frames, refused, serve } = lending();
    window.want(100 * KiB);
    serve(100 * KiB);
    window.ack((frames[0]![1] as { id: number }).id);
    await new Promise((resolve) => setTimeout(resolve, 150));
    expect(refused.map((e) => e.message)).toEqual([expect.stringMatching(/did not acknowledge and use a loan of 102400 bytes of message window within 50 ms/)]);
  });

  it('a second loan taken while one is unused gives the first back (the receive count alone)', () => {
    const back: number[] = [];
    const window = new ReceiveWindow(64 * KiB, 16 * KiB, { ask: () => {}, give: (n) => { back.push(n); }, withdraw: () => {} });
    const first = window.lend(10 * KiB);
    const second = window.lend(20 * KiB);
    window.ack(first.id);
    window.ack(second.id);
    expect(back).toEqual([10 * KiB]);
    expect(window.outstanding).toBe(20 * KiB);
  });

  it('a loan not acknowledged within the liveness time closes the connection RESOURCE_EXHAUSTED; closing gives back what was lent', async () => {
    const { window, refused, serve, back } = lending();
    window.want(300 * KiB);
    serve(300 * KiB);
    await new Promise((resolve) => setTimeout(resolve, 150));
    expect(refused.map((e) => [e.code, e.message])).toEqual([['RESOURCE_EXHAUSTED', expect.stringMatching(/did not acknowledge and use a loan of 307200 bytes of message window within 50 ms/)]]);
    window.close();
    expect(back).toEqual([300 * KiB]);
  });
});

describe('the outbox and loans', () => {
  it('a message over half the peer window waits with its shortfall; borrowed, it goes, and what the loan paid for is not creditable', async () => {
    const { outbox, delivered } = recording();
    outbox.openWindow(64 * KiB);
    outbox.send(0, 1, frame(10 * KiB)).catch(() => {});
    await turn();
    expect(delivered).toEqual([[1]]);
    // Under half the window: it waits for credit alone, no loan.
    outbox.send(0, 2, frame(30 * KiB)).catch(() => {});
    await turn();
    expect(delivered).toEqual([[1], [2]]);
    outbox.send(0, 3, frame(40 * KiB)).catch(() => {});
    await turn();
    expect(delivered).toEqual([[1], [2]]);
    const room = 64 * KiB - one(10 * KiB) - one(30 * KiB);
    expect(outbox.shortfall()).toBe(one(40 * KiB) - room);
    outbox.borrow(outbox.shortfall());
    expect(delivered).toEqual([[1], [2], [3]]);
    expect(outbox.shortfall()).toBe(0);
    expect(outbox.sentBytes - outbox.creditable).toBe(one(40 * KiB) - room);
  });
});

describe("the runtime's budget of loans", () => {
  it('asks are served in order while the loans out fit; one larger than all of it when nothing is lent; a withdrawn ask lets those behind it go', async () => {
    const { WindowLoans } = await import('../../core/rpc/runtime/window-loans.ts');
    const loans = new WindowLoans(100);
    const got: string[] = [];
    const who = (name: string) => ({ lent: (n: number) => { got.push(`${name}:${n}`); } });
    const a = who('a'), b = who('b'), c = who('c'), d = who('d');
    loans.ask(a, 60);
    loans.ask(b, 50);  // 40 free: waits
    loans.ask(c, 10);  // behind b, though it would fit
    expect(got).toEqual(['a:60']);
    expect([loans.lent, loans.waiting]).toEqual([60, 2]);
    loans.give(20);  // 60 free: b
    expect(got).toEqual(['a:60', 'b:50', 'c:10']);
    loans.give(40);
    loans.give(50);
    loans.give(10);
    expect(loans.lent).toBe(0);
    loans.ask(d, 500);  // larger than all of it, nothing lent
    expect(got.at(-1)).toBe('d:500');
    loans.ask(a, 10);
    loans.ask(b, 10);
    expect(loans.waiting).toBe(2);
    loans.withdraw(a);
    loans.give(500);
    expect(got.slice(-1)).toEqual(['b:10']);
    expect(loans.waiting).toBe(0);
  });
});
