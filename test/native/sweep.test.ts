// The worker's sweep (Worker.sweep, docs/binding.md "The sweep"): after every progress pass the
// oldest unexpected message is dropped unread while its tag is not one sweepKnown named, and the
// next one looked at. Off until asked for.
import { afterEach, describe, expect, it } from 'vitest';
import type { Worker } from '../../core/ucx/index.ts';
import { NativePeer } from './fixture.ts';
import { disposePeers } from '../support/peer.ts';
import { connect, EXACT, localSide, TRANSPORTS } from './local.ts';
import { pattern } from './pattern.ts';

afterEach(disposePeers);

const CONTROL = 1n << 63n;
/** A payload tag of high word `word` (class byte and key prefix). */
const payload = (word: number, low: number): bigint => (BigInt(word) << 32n) | BigInt(low);

/** Progresses `worker` until `done()` holds (the peer's messages came in and were swept). */
async function until(worker: Worker, done: () => boolean): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!done()) {
    if (Date.now() > deadline) throw new Error('timed out waiting for the sweep');
    worker.progress();
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** Takes and drops the message under `tag` (so that it leaves no descriptor behind). */
async function take(worker: Worker, tag: bigint): Promise<void> {
  const message = worker.tagProbe(tag, EXACT, { remove: true });
  expect(message).not.toBeNull();
  await worker.tagRecvTaken(message!, new Uint8Array(1 << 20));
}

describe('the sweep', () => {
  const local = localSide(TRANSPORTS.tcp);

  it('leaves every message alone until it is turned on', async () => {
    await using peer = await NativePeer.start(TRANSPORTS.tcp);
    await connect(local.worker, peer.port);
    const tag = CONTROL | 0x1234_5678n;
    await peer.call('send', { tag: String(tag), size: 100, seed: 1 });
    await until(local.worker, () => local.worker.tagProbe(tag, EXACT) !== null);
    expect(local.worker.stats().sweptControl).toBe(0);
    await take(local.worker, tag);
  });

  it('drops what comes under tags of no one, and leaves known tags and what waits behind them', async () => {
    await using peer = await NativePeer.start(TRANSPORTS.tcp);
    await connect(local.worker, peer.port);
    const worker = local.worker;
    const known = CONTROL | 0x0012_3456_0000_0001n;
    const knownWord = 0x0112_3456;
    const before = worker.stats();
    worker.sweep(true);
    try {
      worker.sweepKnown(known, knownWord, true);
      // In this order on the wire: an unknown control message, a known payload, an unknown
      // payload behind it, the known control message.
      const unknown = CONTROL | 0x0099_9999_0000_0002n;
      const knownPayload = payload(knownWord, 7);
      const strayPayload = payload(0x0177_7777, 9);
      for (const [tag, seed] of [[unknown, 1], [knownPayload, 2], [strayPayload, 3], [known, 4]] as const) {
        await peer.call('send', { tag: String(tag), size: 200, seed });
      }
      await until(worker, () => worker.tagProbe(known, EXACT) !== null && worker.stats().sweptControl > before.sweptControl);
      expect(worker.stats().sweptControl).toBe(before.sweptControl + 1);
      expect(worker.tagProbe(unknown, EXACT)).toBeNull();
      // The oldest is now a known payload: the stray behind it, and the known control message,
      // wait for a pass after it left.
      expect(worker.tagProbe(knownPayload, EXACT)).not.toBeNull();
      expect(worker.tagProbe(strayPayload, EXACT)).not.toBeNull();
      expect(worker.stats().sweptData).toBe(before.sweptData);
      await take(worker, knownPayload);
      await until(worker, () => worker.stats().sweptData > before.sweptData);
      expect(worker.tagProbe(strayPayload, EXACT)).toBeNull();
      expect(worker.stats().sweptData).toBe(before.sweptData + 1);
      await take(worker, known);
      expect(worker.stats().sweepPending).toBe(0);
    } finally {
      worker.sweepKnown(known, knownWord, false);
      worker.sweep(false);
    }
  });

  it('counts names: a tag named twice stays known until it is forgotten twice', async () => {
    await using peer = await NativePeer.start(TRANSPORTS.tcp);
    await connect(local.worker, peer.port);
    const worker = local.worker;
    const tag = CONTROL | 0x0055_5555_0000_0003n;
    worker.sweep(true);
    try {
      worker.sweepKnown(tag, 0, true);
      worker.sweepKnown(tag, 0, true);
      worker.sweepKnown(tag, 0, false);
      await peer.call('send', { tag: String(tag), size: 10, seed: 5 });
      await until(worker, () => worker.tagProbe(tag, EXACT) !== null);
      await take(worker, tag);
      worker.sweepKnown(tag, 0, false);
      const swept = worker.stats().sweptControl;
      await peer.call('send', { tag: String(tag), size: 10, seed: 6 });
      await until(worker, () => worker.stats().sweptControl > swept);
      expect(worker.tagProbe(tag, EXACT)).toBeNull();
    } finally {
      worker.sweep(false);
    }
  });

  it('holds a held tag\'s messages aside in order, within their cap, and looks past them', async () => {
    await using peer = await NativePeer.start(TRANSPORTS.tcp);
    await connect(local.worker, peer.port);
    const worker = local.worker;
    const held = CONTROL | 0x0033_3333_0000_0005n;
    const stray = CONTROL | 0x0044_4444_0000_0006n;
    const before = worker.stats();
    worker.sweep(true);
    try {
      worker.sweepKnown(held, 0, true);
      worker.sweepHold(held, 1000 + 3 * 10, 10);
      // Three of 300 bytes under the held tag, each weighing 10 more (930 within the cap of 1030),
      // then one of no one.
      for (const seed of [1, 2, 3]) await peer.call('send', { tag: String(held), size: 300, seed });
      await peer.call('send', { tag: String(stray), size: 10, seed: 9 });
      await until(worker, () => worker.stats().sweptControl > before.sweptControl);
      expect(worker.stats().heldMessages).toBe(3);
      expect(worker.sweepHeld(held)).toEqual({ messages: 3, bytes: 930, over: false });
      // A probe of any tag answers the held line first, or UCX's queue alone with queueOnly.
      const other = CONTROL | 0x0055_5555_0000_0007n;
      worker.sweepKnown(other, 0, true);
      await peer.call('send', { tag: String(other), size: 20, seed: 8 });
      await until(worker, () => worker.tagProbe(other, EXACT) !== null);
      expect(worker.tagProbe(0n, 0n)).toEqual({ senderTag: held, length: 300 });
      expect(worker.tagProbe(0n, 0n, { queueOnly: true })).toEqual({ senderTag: other, length: 20 });
      await take(worker, other);
      worker.sweepKnown(other, 0, false);
      // A fourth would pass the cap: left in UCX's queue, the line over.
      await peer.call('send', { tag: String(held), size: 300, seed: 4 });
      await until(worker, () => worker.sweepHeld(held).over);
      expect(worker.sweepHeld(held).messages).toBe(3);
      // Read first, in the order they came, by a probe and by receives of the tag.
      expect(worker.tagProbe(held, EXACT)).toEqual({ senderTag: held, length: 300 });
      const slot = new Uint32Array(4);
      for (const seed of [1, 2, 3, 4]) {
        const into = new Uint8Array(300);
        expect(worker.tagRecvInto(into, held, EXACT, worker.requestId(), slot, () => {})).toBe(true);
        expect(Buffer.from(into).equals(pattern(300, seed))).toBe(true);
      }
      expect(worker.stats().heldMessages).toBe(0);
      // Forgotten with messages held: they are dropped.
      worker.sweepHold(held, 1000, 10);
      await peer.call('send', { tag: String(held), size: 300, seed: 5 });
      await until(worker, () => worker.sweepHeld(held).messages === 1);
      const swept = worker.stats().sweptControl;
      worker.sweepKnown(held, 0, false);
      expect(worker.stats().heldMessages).toBe(0);
      expect(worker.stats().sweptControl).toBe(swept + 1);
      expect(worker.tagProbe(held, EXACT)).toBeNull();
    } finally {
      worker.sweepHold(held, 0);
      worker.sweep(false);
    }
  });

  it('drops a rendezvous under a tag of no one without its bytes, and its sender completes', async () => {
    await using peer = await NativePeer.start(TRANSPORTS.tcp);
    await connect(local.worker, peer.port);
    const worker = local.worker;
    const tag = CONTROL | 0x0066_6666_0000_0004n;
    const swept = worker.stats().sweptControl;
    worker.sweep(true);
    try {
      // 8 MiB: past UCX's rendezvous threshold over TCP.
      const sent = peer.call('send', { tag: String(tag), size: 8 << 20, seed: 7 }).then(() => 'sent', (error: Error) => `failed: ${error.message}`);
      await until(worker, () => worker.stats().sweptControl > swept);
      await until(worker, () => worker.stats().sweepPending === 0);
      // UCX answers the sender's rendezvous as received (truncated on this side only).
      expect(await sent).toBe('sent');
      expect(worker.tagProbe(tag, EXACT)).toBeNull();
    } finally {
      worker.sweep(false);
    }
  });
});
