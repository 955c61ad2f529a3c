// A peer killed with SIGKILL while operations are pending: every pending operation on its
// endpoint rejects with UNAVAILABLE within 2 s, the endpoint reports the failure, and the
// surviving process keeps working with another peer.
import { afterEach, describe, expect, it } from 'vitest';
import { GdrpcError } from '../../core/errors.ts';
import { MemoryRegion, RemoteKey } from '../../core/ucx/index.ts';
import { NativePeer } from './fixture.ts';
import { disposePeers } from '../support/peer.ts';
import { connect, EXACT, localSide, TRANSPORTS, type TransportName } from './local.ts';
import { digest, pattern } from './pattern.ts';

afterEach(disposePeers);

/** Settles `promise` into [error, ms since `start`]. */
async function outcome(promise: Promise<unknown>, start: () => number): Promise<{ error: unknown; ms: number }> {
  try {
    await promise;
    return { error: undefined, ms: start() };
  } catch (error) {
    return { error, ms: start() };
  }
}

describe.each(Object.keys(TRANSPORTS) as TransportName[])('peer killed over %s', (transport) => {
  const config = TRANSPORTS[transport];
  const local = localSide(config);

  it('rejects pending operations with UNAVAILABLE within 2 s and keeps working', async () => {
    await using doomed = await NativePeer.start(config);
    const ep = await connect(local.worker, doomed.port);
    const remote = await doomed.call<{ address: string; rkey: string }>('expose', { size: 1 << 20, seed: 1 });
    const rkey = RemoteKey.unpack(ep, Buffer.from(remote.rkey, 'base64'));
    const region = MemoryRegion.map(local.context, new ArrayBuffer(1 << 20));
    const failure = new Promise<GdrpcError>((resolve) => ep.once('error', resolve));

    // Rendezvous sends nobody receives stay pending until the peer answers, which it never will.
    // (A flush would not: UCX flushes RMA, and counts a rendezvous send as sent once announced.)
    let killedAt = 0;
    const since = (): number => performance.now() - killedAt;
    const outcomes: Array<Promise<{ error: unknown; ms: number }>> = [];
    for (let i = 0; i < 4; i++) outcomes.push(outcome(ep.tagSend(0xdead0000n + BigInt(i), pattern(4 << 20, i)), since));
    await new Promise((r) => setTimeout(r, 20));
    expect(local.worker.stats().liveRequests).toBe(4);
    killedAt = performance.now();
    await doomed.kill();
    const settled = await Promise.all(outcomes);
    const event = await failure;
    const worst = Math.max(...settled.map((s) => s.ms));
    console.log(`[${transport}] pending operations rejected ${settled.map((s) => s.ms.toFixed(0)).join(', ')} ms after SIGKILL`);
    for (const { error } of settled) {
      expect(error).toBeInstanceOf(GdrpcError);
      expect((error as GdrpcError).code).toBe('UNAVAILABLE');
    }
    expect(worst).toBeLessThan(2000);
    expect(event.code).toBe('UNAVAILABLE');
    expect(ep.failed).toBe(true);

    // The failed endpoint refuses new work with the same code; closing it is a no-op that resolves.
    await expect(ep.tagSend(1n, Buffer.alloc(8))).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    // tagSendNow leaves the failed endpoint for the addon to refuse: a rejection with the same code.
    await expect(ep.tagSendNow(1n, new Uint8Array(8))).rejects.toMatchObject({ code: 'UNAVAILABLE', message: expect.stringMatching(/failed/) });
    await expect(ep.get(region.span(), BigInt(remote.address), rkey)).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    await ep.close();
    await ep.close();
    rkey.close();
    region.close();

    // The survivor talks to a fresh peer.
    await using next = await NativePeer.start(config);
    const ep2 = await connect(local.worker, next.port);
    const echoed = next.call('echo', { tag: '42', size: 1 << 20 });
    await next.event('posted');
    const dst = Buffer.alloc(1 << 20);
    const back = local.worker.tagRecv(dst, 43n, EXACT);
    await ep2.tagSend(42n, pattern(1 << 20, 3));
    await back;
    await echoed;
    expect(digest(dst)).toBe(digest(pattern(1 << 20, 3)));
    await ep2.close();
    expect(local.worker.stats()).toMatchObject({ liveRequests: 0, liveEndpoints: 0 });
  }, 60_000);

  it('cancels a pending receive with an AbortSignal (CANCELLED)', async () => {
    const controller = new AbortController();
    const received = local.worker.tagRecv(Buffer.alloc(16), 0x5151n, EXACT, { signal: controller.signal });
    controller.abort();
    await expect(received).rejects.toMatchObject({ code: 'CANCELLED' });
    await new Promise((r) => setTimeout(r, 50));
    expect(local.worker.stats().liveRequests).toBe(0);
  });
});
