// Tag send/recv between two processes over TCP and shared memory, sizes around the eager and
// rendezvous thresholds, contents verified; mask matching; truncation.
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { GdrpcError } from '../../core/errors.ts';
import { nativeStats } from '../../core/index.ts';
import type { TakenMessage } from '../../core/ucx/index.ts';
import { NativePeer } from './fixture.ts';
import { disposePeers } from '../support/peer.ts';
import { connect, EXACT, localSide, TRANSPORTS, type TransportName } from './local.ts';
import { digest, pattern } from './pattern.ts';

afterEach(disposePeers);
const SIZES = [0, 1, 8191, 8193, 1 << 20, 64 << 20];

/** Has `peer` send `size` bytes of pattern `seed` under `tag` while this thread holds its event
 *  loop: when this resolves, the send was posted on the peer's side and no wake-up of this
 *  process's workers has run since (only microtasks), until the caller yields. `name`: the files
 *  of `dir` the two sides signal by. `sent` settles once the peer's send has. */
async function sendWhileHeld(peer: NativePeer, dir: string, name: string, tag: bigint, size: number, seed: number): Promise<{ sent: Promise<unknown> }> {
  const go = join(dir, `go-${name}`);
  const marker = join(dir, `posted-${name}`);
  const sent = peer.call('sendMarked', { tag: String(tag), size, seed, go, marker });
  await peer.event('armed');
  writeFileSync(go, 'go');
  const until = Date.now() + 30_000;
  while (!existsSync(marker)) {
    if (Date.now() > until) throw new Error(`the peer did not post its ${size}-byte send within 30 s`);
  }
  return { sent };
}

describe.each(Object.keys(TRANSPORTS) as TransportName[])('tag send/recv over %s', (transport) => {
  const config = TRANSPORTS[transport];
  const local = localSide(config);

  it('connects over the configured transport', async () => {
    await using peer = await NativePeer.start(config);
    const ep = await connect(local.worker, peer.port);
    const names = ep.transports().map((t) => t.transport);
    if (transport === 'tcp') expect(names.every((n) => n === 'tcp' || n === '')).toBe(true);
    else expect(names.some((n) => ['posix', 'sysv', 'cma'].includes(n))).toBe(true);
    await ep.close();
  });

  it.each(SIZES)('echoes %i bytes with contents intact', async (size) => {
    await using peer = await NativePeer.start(config);
    const ep = await connect(local.worker, peer.port);
    const tag = 0x1000n + BigInt(size);
    const src = pattern(size, size + 1);
    const dst = Buffer.alloc(size);
    const echoed = peer.call<{ senderTag: string; length: number }>('echo', { tag: String(tag), size });
    await peer.event('posted');
    const back = local.worker.tagRecv(dst, tag + 1n, EXACT);
    await ep.tagSend(tag, src);
    const info = await back;
    expect(await echoed).toEqual({ senderTag: String(tag), length: size });
    expect(info).toEqual({ senderTag: tag + 1n, length: size });
    expect(digest(dst)).toBe(digest(src));
    expect(Buffer.compare(dst, src)).toBe(0);
    await ep.close();
  }, 120_000);

  it.each([1, 8193, 1 << 20])('takes a %i-byte unexpected message out with tagProbe remove, then receives or drops it', async (size) => {
    await using peer = await NativePeer.start(config);
    const ep = await connect(local.worker, peer.port);
    for (const drop of [false, true]) {
      const tag = 0x5000n + BigInt(size) + (drop ? 0x100000n : 0n);
      const src = pattern(size, 3);
      const echoed = peer.call<{ senderTag: string; length: number }>('echo', { tag: String(tag), size });
      await peer.event('posted');
      await ep.tagSend(tag, src);
      // The echo (tag + 1) arrives here with no receive posted: it waits in UCX's unexpected queue.
      let taken: TakenMessage | null = null;
      await expect.poll(() => (taken = local.worker.tagProbe(tag + 1n, EXACT, { remove: true })) !== null, { timeout: 10_000 }).toBe(true);
      expect(taken!.length).toBe(size);
      expect(local.worker.tagProbe(tag + 1n, EXACT)).toBeNull();
      expect(local.worker.stats().takenMessages).toBe(1);
      if (drop) {
        // Into one byte, as the dispatcher drops payloads: anything longer is truncated.
        const dropped = local.worker.tagRecvTaken(taken!, new Uint8Array(1));
        if (size > 1) await expect(dropped).rejects.toThrow(/truncat/i);
        else expect((await dropped).length).toBe(1);
      } else {
        const dst = Buffer.alloc(size);
        expect(await local.worker.tagRecvTaken(taken!, dst)).toEqual({ senderTag: tag + 1n, length: size });
        expect(Buffer.compare(dst, src)).toBe(0);
      }
      // Either way the sender completes, and the message cannot be received twice.
      expect((await echoed).length).toBe(size);
      expect(local.worker.stats().takenMessages).toBe(0);
      await expect(local.worker.tagRecvTaken(taken!, Buffer.alloc(size))).rejects.toThrow(/no taken message/);
    }
    await ep.close();
  }, 120_000);

  it('matches receives by tag under a mask and reports the sender tag', async () => {
    await using peer = await NativePeer.start(config);
    const ep = await connect(local.worker, peer.port);
    // The peer accepts any tag whose high 32 bits are 0xABCD, whatever the low bits.
    const received = peer.call<{ senderTag: string; length: number; digest: string }>('recv', {
      tag: String(0xabcd_0000_0000n), mask: String(0xffff_ffff_0000_0000n), size: 64 });
    await peer.event('posted');
    // A message outside the mask must not match: it stays unexpected while the matching one lands.
    await ep.tagSend(0x1234_0000_0007n, pattern(16, 1));
    const payload = pattern(64, 9);
    await ep.tagSend(0xabcd_0000_1234n, payload);
    const info = await received;
    expect(info).toEqual({ senderTag: String(0xabcd_0000_1234n), length: 64, digest: digest(payload) });
    // The non-matching message is still there for an exact receive on this side's peer.
    const rest = await peer.call<{ senderTag: string; length: number }>('recv', {
      tag: String(0x1234_0000_0007n), mask: String(EXACT), size: 16 });
    expect(rest.senderTag).toBe(String(0x1234_0000_0007n));
    expect(rest.length).toBe(16);
    await ep.close();
  });

  it('tagSendNow: undefined for a message UCX sent inside the call, a promise for a rendezvous, a rejection for a closed endpoint', async () => {
    await using peer = await NativePeer.start(config);
    const ep = await connect(local.worker, peer.port);
    const before = nativeStats().requests;
    for (const [size, seed] of [[64, 5], [1 << 20, 6]] as const) {
      const tag = 0x7000n + BigInt(size);
      const received = peer.call<{ senderTag: string; length: number; digest: string }>('recv', { tag: String(tag), mask: String(EXACT), size });
      await peer.event('posted');
      const payload = pattern(size, seed);
      const sent = ep.tagSendNow(tag, payload);
      // An eager message on an idle endpoint leaves at once (no promise, no request kept); a
      // 1 MiB one waits for the peer's receive (rendezvous).
      if (size === 64) expect(sent).toBeUndefined();
      else expect(sent).toBeInstanceOf(Promise);
      await sent;
      expect(await received).toEqual({ senderTag: String(tag), length: size, digest: digest(payload) });
    }
    expect(nativeStats().requests).toBe(before);
    await ep.close();
    const refused = ep.tagSendNow(0x7100n, pattern(8, 1));
    expect(refused).toBeInstanceOf(Promise);
    await expect(refused).rejects.toMatchObject({ code: 'FAILED_PRECONDITION' });
  });

  it('tagRecvInto: a queued message is received inside the call, a later one through the callback, its tag and length in the slot; truncation, cancel and a bad slot', async () => {
    await using peer = await NativePeer.start(config);
    await connect(local.worker, peer.port);
    const worker = local.worker;
    const before = nativeStats().requests;
    const slot = new Uint32Array(4);
    const buffer = Buffer.alloc(4096);
    const told: unknown[] = [];
    const done = (error?: unknown): void => { told.push(error ?? 'received'); };
    const words = (tag: bigint, length: number): number[] => [Number(tag & 0xffff_ffffn), Number(tag >> 32n), length, 0];
    const base = 0x8800_0000_1234_0000n;
    // Already in UCX's queue: done inside the call, nothing told.
    await peer.call('send', { tag: String(base + 1n), size: 100, seed: 3 });
    await expect.poll(() => worker.tagProbe(base + 1n, EXACT) !== null, { timeout: 10_000 }).toBe(true);
    expect(worker.tagRecvInto(buffer, base + 1n, EXACT, worker.requestId(), slot, done)).toBe(true);
    expect([...slot]).toEqual(words(base + 1n, 100));
    expect(digest(buffer.subarray(0, 100))).toBe(digest(pattern(100, 3)));
    // Pending, then told once it arrived (the slot written first).
    expect(worker.tagRecvInto(buffer, base + 2n, EXACT, worker.requestId(), slot, done)).toBe(false);
    await peer.call('send', { tag: String(base + 2n), size: 200, seed: 4 });
    await expect.poll(() => told.length, { timeout: 10_000 }).toBe(1);
    expect(told).toEqual(['received']);
    expect([...slot]).toEqual(words(base + 2n, 200));
    expect(digest(buffer.subarray(0, 200))).toBe(digest(pattern(200, 4)));
    // Longer than the buffer, pending: told with the error.
    expect(worker.tagRecvInto(buffer.subarray(0, 16), base + 3n, EXACT, worker.requestId(), slot, done)).toBe(false);
    await peer.call('send', { tag: String(base + 3n), size: 64, seed: 5 });
    await expect.poll(() => told.length, { timeout: 10_000 }).toBe(2);
    expect(told[1]).toMatchObject({ code: 'INVALID_ARGUMENT', details: { senderTag: base + 3n, length: 64 } });
    expect((told[1] as GdrpcError).message).toMatch(/truncated/);
    // Longer than the buffer and already queued: thrown.
    await peer.call('send', { tag: String(base + 5n), size: 64, seed: 6 });
    await expect.poll(() => worker.tagProbe(base + 5n, EXACT) !== null, { timeout: 10_000 }).toBe(true);
    let thrown: unknown;
    try {
      worker.tagRecvInto(buffer.subarray(0, 16), base + 5n, EXACT, worker.requestId(), slot, done);
    } catch (error) {
      thrown = error;
    }
    expect((thrown as GdrpcError).message).toMatch(/truncated/);
    console.log(`inline truncation details: ${JSON.stringify((thrown as GdrpcError).details, (_, v: unknown) => (typeof v === 'bigint' ? v.toString(16) : v))}`);
    expect(told).toHaveLength(2);
    // A receive posted from `done` (inside the wake-up's loop) adds no loop pass; one posted
    // from outside schedules one.
    let kicksInside = -1;
    let postedInside: boolean | undefined;
    let againId = 0;
    const kicksBefore = worker.stats().kicks;
    expect(worker.tagRecvInto(buffer, base + 6n, EXACT, worker.requestId(), slot, () => {
      const at = worker.stats().kicks;
      againId = worker.requestId();
      postedInside = worker.tagRecvInto(buffer, base + 7n, EXACT, againId, slot, done);
      kicksInside = worker.stats().kicks - at;
    })).toBe(false);
    expect(worker.stats().kicks).toBeGreaterThan(kicksBefore);
    await peer.call('send', { tag: String(base + 6n), size: 8, seed: 7 });
    await expect.poll(() => postedInside, { timeout: 10_000 }).toBe(false);
    expect(kicksInside).toBe(0);
    worker.cancelRequest(againId);
    // Cancelled: nothing told, the request goes.
    const id = worker.requestId();
    expect(worker.tagRecvInto(buffer, base + 4n, EXACT, id, slot, done)).toBe(false);
    worker.cancelRequest(id);
    await expect.poll(() => nativeStats().requests, { timeout: 10_000 }).toBe(before);
    expect(told).toHaveLength(2);
    expect(() => worker.tagRecvInto(buffer, base, EXACT, worker.requestId(), new Uint32Array(2), done)).toThrow(/slot/);
    expect(nativeStats().requests).toBe(before);
  });

  it('tagWatch: a queued message is taken inside the call, a later one through the callback, before any byte is received; tagRecvTakenInto receives it; tagUnwatch disarms', async () => {
    await using peer = await NativePeer.start(config);
    await connect(local.worker, peer.port);
    const worker = local.worker;
    const takenBefore = worker.stats().takenMessages;
    const slot = new Uint32Array(5);
    const into = new Uint32Array(4);
    const buffer = Buffer.alloc(4096);
    let told = 0;
    const taken = (): void => { told += 1; };
    const base = 0x8a00_0000_5678_0000n;
    const mask = 0xffff_ffff_ffff_0000n;
    const received = (): void => { throw new Error('a taken eager message is received inside the call'); };
    // Already in UCX's queue: taken inside the call, its tag, length and taken id in the slot.
    await peer.call('send', { tag: String(base + 1n), size: 100, seed: 3 });
    await expect.poll(() => worker.tagProbe(base + 1n, EXACT) !== null, { timeout: 10_000 }).toBe(true);
    const takes = worker.stats().watchTakes;
    expect(worker.tagWatch(base, mask, slot, taken)).toBe(true);
    expect([...slot.subarray(0, 4)]).toEqual([Number((base + 1n) & 0xffff_ffffn), Number((base + 1n) >> 32n), 100, 0]);
    expect(worker.tagProbe(base + 1n, EXACT)).toBeNull();  // out of UCX's queue
    expect(worker.stats().takenMessages).toBe(takenBefore + 1);
    expect(worker.stats().watchTakes).toBe(takes + 1);
    expect(worker.tagRecvTakenInto(slot[4]!, buffer, worker.requestId(), into, received)).toBe(true);
    expect([...into]).toEqual([...slot.subarray(0, 4)]);
    expect(digest(buffer.subarray(0, 100))).toBe(digest(pattern(100, 3)));
    expect(worker.stats().takenMessages).toBe(takenBefore);
    // Armed: the next message is taken after the pass that brings it in, and told.
    expect(worker.tagWatch(base, mask, slot, taken)).toBe(false);
    await peer.call('send', { tag: String(base + 2n), size: 200, seed: 4 });
    await expect.poll(() => told, { timeout: 10_000 }).toBe(1);
    expect([...slot.subarray(0, 3)]).toEqual([Number((base + 2n) & 0xffff_ffffn), Number((base + 2n) >> 32n), 200]);
    expect(worker.tagRecvTakenInto(slot[4]!, buffer, worker.requestId(), into, received)).toBe(true);
    expect(digest(buffer.subarray(0, 200))).toBe(digest(pattern(200, 4)));
    // Disarmed: nothing was taken, nothing is told, what comes stays in UCX's queue.
    expect(worker.tagWatch(base, mask, slot, taken)).toBe(false);
    expect(worker.tagUnwatch()).toBe(false);
    await peer.call('send', { tag: String(base + 3n), size: 8, seed: 5 });
    await expect.poll(() => worker.tagProbe(base + 3n, EXACT) !== null, { timeout: 10_000 }).toBe(true);
    expect(told).toBe(1);
    // A taken message whose receive is dropped into one byte: truncated, gone.
    expect(worker.tagWatch(base, mask, slot, taken)).toBe(true);
    const message: TakenMessage = { senderTag: base + 3n, length: 8, taken: slot[4]! };
    await expect(worker.tagRecvTaken(message, Buffer.alloc(1))).rejects.toThrow(/truncated/);
    expect(worker.stats().takenMessages).toBe(takenBefore);
    expect(() => worker.tagWatch(base, mask, new Uint32Array(4), taken)).toThrow(/slot/);
    expect(() => worker.tagRecvTakenInto(12345, buffer, worker.requestId(), into, received)).toThrow(/no taken message/);
  });

  it('tagWatch: a take not told yet (a probe\'s progress pass took it) is the caller\'s after tagUnwatch, and is not told', async () => {
    await using peer = await NativePeer.start(config);
    await connect(local.worker, peer.port);
    await peer.call('waitConnections', { count: 1 });
    const worker = local.worker;
    const dir = mkdtempSync(join(tmpdir(), 'gdrpc-watch-'));
    try {
      const tag = 0x8b00_0000_0000_0001n;
      const slot = new Uint32Array(5);
      let told = 0;
      expect(worker.tagWatch(tag, EXACT, slot, () => { told += 1; })).toBe(false);
      // From here on this thread does not yield: no wake-up of this worker can take the message.
      const { sent } = await sendWhileHeld(peer, dir, 'watch', tag, 64, 9);
      // A probe of another tag makes a progress pass until the message is in: the watch takes it.
      const spinUntil = Date.now() + 10_000;
      while (worker.stats().takenMessages === 0 && Date.now() < spinUntil) worker.tagProbe(tag + 1n, EXACT);
      expect(worker.stats().takenMessages).toBe(1);
      expect(worker.tagUnwatch()).toBe(true);
      expect([...slot.subarray(0, 3)]).toEqual([Number(tag & 0xffff_ffffn), Number(tag >> 32n), 64]);
      const into = new Uint32Array(4);
      const buffer = Buffer.alloc(64);
      expect(worker.tagRecvTakenInto(slot[4]!, buffer, worker.requestId(), into, () => {})).toBe(true);
      expect(digest(buffer)).toBe(digest(pattern(64, 9)));
      await sent;
      // Its event was settled without telling anyone.
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(told).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  // A payload's receive is often posted after its bytes came in but before this worker was
  // progressed (they lie in the transport, not yet in UCX's unexpected queue). The binding makes
  // one progress pass right after such a post: an eager message then completes inside the call,
  // without waiting for the next wake-up; a rendezvous's announcement is matched there.
  it('a receive posted after its message came in completes inside its post (one progress pass)', async () => {
    await using peer = await NativePeer.start(config);
    await connect(local.worker, peer.port);
    await peer.call('waitConnections', { count: 1 });
    const worker = local.worker;
    const dir = mkdtempSync(join(tmpdir(), 'gdrpc-at-post-'));
    try {
      const cases = [
        { size: 64, eager: true, into: 64 },
        { size: 4096, eager: true, into: 4096 },
        { size: 1000, eager: true, into: 100 },  // truncated: rejected, counted all the same
        { size: 1 << 20, eager: false, into: 1 << 20 },
      ];
      for (const [index, { size, eager, into }] of cases.entries()) {
        const tag = 0x9900n + BigInt(index);
        // From here until the receive is posted this thread does not yield: no wake-up of this
        // worker can take the message in first.
        const { sent } = await sendWhileHeld(peer, dir, String(index), tag, size, index + 1);
        const atPost = worker.stats().payloadsAtPost;
        const dest = Buffer.alloc(into);
        let outcome: unknown = 'pending';
        const received = worker.tagRecv(dest, tag, EXACT, { untilComplete: true })
          .then((info) => { outcome = info; }, (error: unknown) => { outcome = error; });
        const counted = worker.stats().payloadsAtPost - atPost;
        // Settled without a turn of the event loop: microtasks only.
        for (let i = 0; i < 20; i++) await Promise.resolve();
        const what = `${size} bytes into ${into}`;
        if (eager) {
          expect(counted, what).toBe(1);
          if (into < size) {
            expect(outcome, what).toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/truncated/) });
          } else {
            expect(outcome, what).toEqual({ senderTag: tag, length: size });
            expect(digest(dest), what).toBe(digest(pattern(size, index + 1)));
          }
        } else {
          // The pass matched the announcement; the bytes follow through later wake-ups.
          expect(counted, what).toBe(0);
          expect(outcome, what).toBe('pending');
          await received;
          expect(outcome, what).toEqual({ senderTag: tag, length: size });
          expect(digest(dest), what).toBe(digest(pattern(size, index + 1)));
        }
        await received;
        await sent;
      }
      expect(worker.stats().liveRequests).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects a receive into a smaller buffer with INVALID_ARGUMENT "truncated"', async () => {
    await using peer = await NativePeer.start(config);
    await connect(local.worker, peer.port);
    await peer.call('waitConnections', { count: 1 });
    const small = Buffer.alloc(100);
    const received = local.worker.tagRecv(small, 77n, EXACT).then(() => undefined, (e: unknown) => e);
    await peer.call('send', { tag: '77', size: 1000, seed: 3 });
    const error = await received;
    expect(error).toBeInstanceOf(GdrpcError);
    expect((error as GdrpcError).code).toBe('INVALID_ARGUMENT');
    expect((error as GdrpcError).message).toMatch(/truncated/);
    expect(local.worker.stats().liveRequests).toBe(0);
  });

  // A rendezvous receive that has matched its message cannot be cancelled by UCX: the data keeps
  // landing in the buffer. Without untilComplete the promise rejects at once anyway; with it, the
  // promise settles only once UCX has let go of the buffer.
  it.each([false, true])('cancelling a matched 64 MiB receive (untilComplete: %s)', async (untilComplete) => {
    const size = 64 << 20;
    await using peer = await NativePeer.start(config);
    await connect(local.worker, peer.port);
    await peer.call('waitConnections', { count: 1 });
    const sent = peer.call('send', { tag: '78', size, seed: 5 });
    // The message's announcement is queued here: the receive posted next matches it at once.
    await vi.waitFor(() => { expect(local.worker.tagProbe(78n, EXACT)).not.toBeNull(); }, { timeout: 20_000, interval: 5 });
    const dest = Buffer.alloc(size);
    const stop = new AbortController();
    let liveAtSettle = -1;
    const received = local.worker.tagRecv(dest, 78n, EXACT, { signal: stop.signal, untilComplete })
      .then(() => 'OK', (e: GdrpcError) => e.code)
      .finally(() => { liveAtSettle = local.worker.stats().liveRequests; });
    stop.abort();
    const outcome = await received;
    if (untilComplete) {
      // Whatever the outcome, UCX is done with `dest` when the promise settles.
      expect(liveAtSettle).toBe(0);
      if (outcome === 'OK') expect(digest(dest)).toBe(digest(pattern(size, 5)));
    } else {
      // Rejected while UCX still owns the buffer: the hazard untilComplete exists for.
      expect(outcome).toBe('CANCELLED');
      expect(liveAtSettle).toBe(1);
    }
    await sent;
    await vi.waitFor(() => { expect(local.worker.stats().liveRequests).toBe(0); }, { timeout: 20_000 });
  });
});

// The progress modes: the event fd alone (no watchdog, no polling after work), the adaptive
// polling window (the default) without a watchdog, and a fixed busy-poll window after each event.
const MODES = [
  { mode: 'event fd only', options: { watchdogMs: 0, busyPollUs: 0 } },
  { mode: 'adaptive window, no watchdog', options: { watchdogMs: 0, busyPollUs: 'adaptive' as const } },
  { mode: 'busy poll 500 us', options: { busyPollUs: 500 } },
];

describe.each(MODES)('tag echo over tcp, $mode', ({ options }) => {
  const config = TRANSPORTS.tcp;
  const local = localSide(config, options);

  it.each([1, 8193, 1 << 20])('echoes %i bytes', async (size) => {
    await using peer = await NativePeer.start(config);
    const ep = await connect(local.worker, peer.port);
    const src = pattern(size, 21);
    const dst = Buffer.alloc(size);
    const echoed = peer.call('echo', { tag: '9000', size });
    await peer.event('posted');
    const back = local.worker.tagRecv(dst, 9001n, EXACT);
    await ep.tagSend(9000n, src);
    expect(await back).toEqual({ senderTag: 9001n, length: size });
    await echoed;
    expect(Buffer.compare(dst, src)).toBe(0);
    await ep.close();
  });
});
