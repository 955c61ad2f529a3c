// A connection's outbox (core/rpc/connection/outbox.ts) against a link that records the messages
// it is handed: how the frames of a turn are cut into messages, frames sent soon, and a close.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { BATCH_FRAMES, Outbox, SOON_MS, type OutboxLink } from '../../core/rpc/connection/outbox.ts';
import { PostedFrame, type FrameDone } from '../../core/rpc/connection/posted-frame.ts';
import { FRAME_HEADER, unpackMessage } from '../../core/wire/message.ts';

/** An outbox whose messages are kept as lists of [kind, call] (and whose link can fail or close). */
function recording(options: { maxFrame?: number; fail?: boolean; throws?: boolean; inline?: boolean; soon?: OutboxLink['soon'] } = {}): { outbox: Outbox; messages: Array<Array<[number, number]>>; faults: unknown[]; closeLink(): void } {
  const messages: Array<Array<[number, number]>> = [];
  const faults: unknown[] = [];
  let refusal: unknown;
  const link: OutboxLink = {
    soon: options.soon,
    fault: (error) => { faults.push(error); },
    maxFrame: () => options.maxFrame ?? Number.MAX_SAFE_INTEGER,
    refusal: () => refusal,
    deliver: (message) => {
      if (options.throws === true) throw new Error('link threw');
      messages.push(unpackMessage(message).map((f) => [f.kind, f.call]));
      if (options.inline === true) return undefined;
      return options.fail === true ? Promise.reject(new Error('link failed')) : Promise.resolve();
    },
  };
  return { outbox: new Outbox(link), messages, faults, closeLink: () => { refusal = new Error('closed'); } };
}

const body = (n: number): Uint8Array => new Uint8Array(n);
/** Lets queued microtasks run (the end-of-turn flush among them). */
const microtasks = async (): Promise<void> => { for (let i = 0; i < 5; i += 1) await Promise.resolve(); };

afterEach(() => { vi.useRealTimers(); });

describe('outbox', () => {
  it.each([1, 5, BATCH_FRAMES, BATCH_FRAMES + 1, 40])('%i frames of one turn leave in order, at most 16 to a message', async (count) => {
    const { outbox, messages } = recording();
    const sent = Array.from({ length: count }, (_, i) => outbox.send(4, i + 1, body(3)));
    await Promise.all(sent);
    expect(messages.flat()).toEqual(Array.from({ length: count }, (_, i) => [4, i + 1]));
    expect(messages.map((m) => m.length)).toEqual(Array.from({ length: Math.ceil(count / BATCH_FRAMES) }, (_, i) => Math.min(BATCH_FRAMES, count - i * BATCH_FRAMES)));
  });

  it("frames of separate turns leave in separate messages; a message never exceeds the peer's maxFrame", async () => {
    const { outbox, messages } = recording({ maxFrame: 2 * (FRAME_HEADER + 100) });
    await outbox.send(4, 1, body(100));
    await outbox.send(4, 2, body(100));
    expect(messages).toEqual([[[4, 1]], [[4, 2]]]);
    messages.length = 0;
    await Promise.all([1, 2, 3, 4, 5].map((call) => outbox.send(4, call, body(100))));
    expect(messages.map((m) => m.length)).toEqual([2, 2, 1]);
  });

  it('a frame sent soon joins the next message, first; alone it waits SOON_MS, from its own sending', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    const { outbox, messages } = recording();
    outbox.sendSoon(12, 7, body(2));
    await outbox.send(4, 1, body(2));
    expect(messages).toEqual([[[12, 7], [4, 1]]]);
    messages.length = 0;
    // Frame 7's timer is left to run out; frame 8, sent half-way through it, still waits its own
    // SOON_MS (at most twice that): the timer finds it too young and waits again.
    vi.advanceTimersByTime(SOON_MS / 2);
    outbox.sendSoon(12, 8, body(2));
    await microtasks();
    vi.advanceTimersByTime(SOON_MS - 0.01);
    expect(messages).toEqual([]);
    vi.advanceTimersByTime(SOON_MS / 2 + 0.01);
    expect(messages).toEqual([[[12, 8]]]);
    // Nothing waits, and the timer ran out without setting another.
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a frame that went with a message leaves no timer behind that sends anything', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    const { outbox, messages } = recording();
    outbox.sendSoon(12, 7, body(2));
    await outbox.send(4, 1, body(2));
    vi.advanceTimersByTime(10 * SOON_MS);
    expect(messages).toEqual([[[12, 7], [4, 1]]]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a frame sent soon after an early flush keeps waiting for company', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const { outbox, messages } = recording();
    const sent = Array.from({ length: BATCH_FRAMES }, (_, i) => outbox.send(4, i + 1, body(2)));
    outbox.sendSoon(12, 99, body(2));
    await Promise.all(sent);
    await microtasks();
    expect(messages.map((m) => m.length)).toEqual([BATCH_FRAMES]);
    await outbox.send(4, 100, body(2));
    expect(messages.at(-1)).toEqual([[12, 99], [4, 100]]);
  });

  it('frames sent soon count towards the 16 of a message', async () => {
    const { outbox, messages } = recording();
    for (let i = 0; i < 40; i += 1) outbox.sendSoon(12, 1000 + i, body(2));
    await Promise.all(Array.from({ length: BATCH_FRAMES }, (_, i) => outbox.send(4, i + 1, body(2))));
    expect(Math.max(...messages.map((m) => m.length))).toBe(BATCH_FRAMES);
    expect(messages.flat()).toEqual([...Array.from({ length: 40 }, (_, i) => [12, 1000 + i]), ...Array.from({ length: BATCH_FRAMES }, (_, i) => [4, i + 1])]);
  });

  it('once the link is closed queued frames fail with its refusal and nothing is delivered', async () => {
    const { outbox, messages, closeLink } = recording();
    const pending = outbox.send(4, 1, body(2));
    closeLink();
    await expect(pending).rejects.toThrow('closed');
    expect(messages).toEqual([]);
  });

  it.each([['rejects', { fail: true }], ['throws', { throws: true }]] as const)('a link that %s fails every frame of its messages, and the flush goes on', async (_, options) => {
    const { outbox } = recording(options);
    const results = await Promise.allSettled(Array.from({ length: BATCH_FRAMES + 2 }, (_, i) => outbox.send(4, i + 1, body(2))));
    expect(results.every((r) => r.status === 'rejected')).toBe(true);
  });

  it('a posted frame is told sent when its message left at once (no promise), in the flush that sent it', async () => {
    const { outbox, messages } = recording({ inline: true });
    const told: string[] = [];
    const done = (call: number): FrameDone => ({ sent: () => told.push(`sent ${call}`), failed: () => told.push(`failed ${call}`) });
    outbox.post(4, 1, body(2), done(1));
    expect(told).toEqual([]);
    await microtasks();
    expect(told).toEqual(['sent 1']);
    // The frame that fills a message sends it at once, within post.
    for (let call = 2; call <= BATCH_FRAMES + 1; call += 1) outbox.post(4, call, body(2), done(call));
    expect(told).toHaveLength(1 + BATCH_FRAMES);
    expect(messages.map((m) => m.length)).toEqual([1, BATCH_FRAMES]);
  });

  it.each([['rejects', { fail: true }], ['throws', { throws: true }], ['is closed', { close: true }]] as const)('a posted frame is told failed when its link %s', async (_, options) => {
    const { outbox, closeLink } = recording({ fail: 'fail' in options, throws: 'throws' in options });
    const told: unknown[] = [];
    outbox.post(4, 1, body(2), { sent: () => told.push('sent'), failed: (error) => told.push(error) });
    if ('close' in options) closeLink();
    await microtasks();
    expect(told).toHaveLength(1);
    expect(told[0]).toBeInstanceOf(Error);
  });

  it.each([true, false])("a FrameDone that throws leaves no frame untold, never comes out of post, and is reported once its message's frames were told (sent at once: %s)", async (inline) => {
    const { outbox, messages, faults } = recording({ inline });
    const told: string[] = [];
    const bug = new Error('a bug in a FrameDone');
    const throwing: FrameDone = { sent() { told.push('throwing'); throw bug; }, failed() { told.push('throwing failed'); } };
    const quiet = (name: string): FrameDone => ({ sent() { told.push(name); }, failed() { told.push(`${name} failed`); } });
    outbox.post(4, 1, body(3), throwing);
    // Two messages' worth: the 16th frame fills the first, which leaves inside that post.
    for (let call = 2; call <= BATCH_FRAMES + 3; call += 1) expect(() => outbox.post(4, call, body(3), quiet(String(call)))).not.toThrow();
    await microtasks();
    expect(messages.map((m) => m.length)).toEqual([BATCH_FRAMES, 3]);
    // Each frame told once, sent; the throw reported once.
    expect(told).toEqual(['throwing', ...Array.from({ length: BATCH_FRAMES + 2 }, (_, i) => String(i + 2))]);
    expect(faults).toEqual([bug]);
  });

  it('a FrameDone that throws when its frame fails (closed link) is reported too, and the others are told', async () => {
    const { outbox, messages, faults, closeLink } = recording();
    const told: string[] = [];
    const bug = new Error('a bug in a FrameDone');
    outbox.post(4, 1, body(3), { sent() {}, failed() { told.push('1 failed'); throw bug; } });
    outbox.post(4, 2, body(3), { sent() {}, failed() { told.push('2 failed'); } });
    closeLink();
    await microtasks();
    expect(messages).toEqual([]);
    expect(told).toEqual(['1 failed', '2 failed']);
    expect(faults).toEqual([bug]);
  });

  it("PostedFrame: failure() waits for the frame's fate, and onFailed runs once, after", async () => {
    const failures: unknown[] = [];
    const left = new PostedFrame((error) => failures.push(error));
    const asked = left.failure();
    left.sent();
    left.failed(new Error('too late'));
    expect(await asked).toBeUndefined();
    const lost = new PostedFrame((error) => failures.push(error));
    const waiting = lost.failure();
    const error = new Error('closed');
    lost.failed(error);
    expect(failures).toEqual([]);
    expect(await waiting).toBe(error);
    expect(await lost.failure()).toBe(error);
    expect(failures).toEqual([error]);
  });

  it("the link's own frame waiting for company (soonPending) is made when a message takes it, after the frames sent soon, once however often it was marked", async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    let made = 0;
    let next = 0;
    const { outbox, messages } = recording({ soon: () => { made += 1; next += 1; return next === 3 ? [] : [{ kind: 16, call: 100 + next, body: body(2) }]; } });
    outbox.sendSoon(12, 7, body(2));
    outbox.soonPending();
    outbox.soonPending();
    expect(made).toBe(0);
    await outbox.send(4, 1, body(2));
    expect(messages).toEqual([[[12, 7], [16, 101], [4, 1]]]);
    expect(made).toBe(1);
    // Alone it leaves after SOON_MS; not marked, it is not asked for.
    messages.length = 0;
    outbox.soonPending();
    vi.advanceTimersByTime(SOON_MS + 0.01);
    expect(messages).toEqual([[[16, 102]]]);
    await outbox.send(4, 2, body(2));
    expect(made).toBe(2);
    // A link that has nothing to send after all sends nothing of its own.
    messages.length = 0;
    outbox.soonPending();
    vi.advanceTimersByTime(SOON_MS + 0.01);
    expect(messages).toEqual([]);
    expect(made).toBe(3);
    // flushSoon takes it at once; close forgets it.
    outbox.soonPending();
    outbox.flushSoon();
    expect(messages).toEqual([[[16, 104]]]);
    outbox.soonPending();
    outbox.close();
    vi.advanceTimersByTime(10 * SOON_MS);
    expect(made).toBe(4);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("the link's frame counts towards the 16 of a message", async () => {
    const { outbox, messages } = recording({ soon: () => [{ kind: 16, call: 0, body: body(2) }] });
    outbox.soonPending();
    await Promise.all(Array.from({ length: BATCH_FRAMES }, (_, i) => outbox.send(4, i + 1, body(2))));
    expect(messages.map((m) => m.length)).toEqual([BATCH_FRAMES, 1]);
    expect(messages[0]![0]).toEqual([16, 0]);
  });

  it('flushSoon sends the frames waiting for company at once and keeps the turn\'s others queued; close drops the waiting ones', async () => {
    const { outbox, messages } = recording();
    outbox.sendSoon(12, 1, body(2));
    const later = outbox.send(4, 2, body(2));
    outbox.flushSoon();
    expect(messages).toEqual([[[12, 1]]]);
    await later;
    expect(messages).toEqual([[[12, 1]], [[4, 2]]]);
    messages.length = 0;
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    outbox.sendSoon(12, 3, body(2));
    outbox.close();
    vi.advanceTimersByTime(SOON_MS + 1);
    expect(messages).toEqual([]);
  });
});
