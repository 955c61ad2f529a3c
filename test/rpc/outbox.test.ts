// A connection's outbox (core/rpc/connection/outbox.ts) against a link that records the messages
// it is handed: how the frames of a turn are cut into messages, frames sent soon, and a close.
import { describe, expect, it } from 'vitest';
import { BATCH_FRAMES, Outbox, SOON_MS, type OutboxLink } from '../../core/rpc/connection/outbox.ts';
import { FRAME_HEADER, unpackMessage } from '../../core/wire/message.ts';

/** An outbox whose messages are kept as lists of [kind, call] (and whose link can fail or close). */
function recording(options: { maxFrame?: number; fail?: boolean } = {}): { outbox: Outbox; messages: Array<Array<[number, number]>>; closeLink(): void } {
  const messages: Array<Array<[number, number]>> = [];
  let refusal: unknown;
  const link: OutboxLink = {
    maxFrame: () => options.maxFrame ?? Number.MAX_SAFE_INTEGER,
    refusal: () => refusal,
    deliver: (message) => {
      messages.push(unpackMessage(message).map((f) => [f.kind, f.call]));
      return options.fail === true ? Promise.reject(new Error('link failed')) : Promise.resolve();
    },
  };
  return { outbox: new Outbox(link), messages, closeLink: () => { refusal = new Error('closed'); } };
}

const body = (n: number): Uint8Array => new Uint8Array(n);
const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

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

  it('a frame sent soon joins the next message, first; alone it leaves after SOON_MS', async () => {
    const { outbox, messages } = recording();
    outbox.sendSoon(12, 7, body(2));
    await outbox.send(4, 1, body(2));
    expect(messages).toEqual([[[12, 7], [4, 1]]]);
    messages.length = 0;
    outbox.sendSoon(12, 8, body(2));
    await turn();
    await new Promise((resolve) => setTimeout(resolve, SOON_MS + 20));
    expect(messages).toEqual([[[12, 8]]]);
  });

  it('once the link is closed queued frames fail with its refusal and nothing is delivered', async () => {
    const { outbox, messages, closeLink } = recording();
    const pending = outbox.send(4, 1, body(2));
    closeLink();
    await expect(pending).rejects.toThrow('closed');
    expect(messages).toEqual([]);
  });

  it('a failed delivery fails every frame of that message', async () => {
    const { outbox } = recording({ fail: true });
    const results = await Promise.allSettled([outbox.send(4, 1, body(2)), outbox.send(4, 2, body(2))]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
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
    outbox.sendSoon(12, 3, body(2));
    outbox.close();
    await new Promise((resolve) => setTimeout(resolve, SOON_MS + 20));
    expect(messages).toEqual([]);
  });
});
