// No leaks: 10,000 send/recv round trips (host buffers and mapped-region spans, with regions
// mapped and unmapped along the way) leave resident memory flat and every native counter at zero.
import { afterEach, describe, expect, it } from 'vitest';
import { Context, MemoryRegion, Worker, nativeStats } from '../../core/ucx/index.ts';
import { NativePeer } from './fixture.ts';
import { disposePeers } from '../support/peer.ts';
import { connect, EXACT } from './local.ts';
import { fillPattern } from './pattern.ts';

afterEach(disposePeers);
const CYCLES = 10_000;
const WARMUP = 1_000;
/** Allowed RSS growth between the end of the warm-up and the end of the run. */
const RSS_BOUND = 16 * 1024 * 1024;

describe('resource use', () => {
  it(`${CYCLES} round trips leave RSS within ${RSS_BOUND >> 20} MiB and native counters at zero`, async () => {
    const config = { TLS: 'tcp' };
    await using peer = await NativePeer.start(config);
    const context = Context.create({ config });
    const worker = Worker.create(context);
    const ep = await connect(worker, peer.port);
    // Above the eager threshold (rendezvous), and large enough that leaking one buffer per cycle
    // would show: 10,000 x 16 KiB = 160 MiB against the bound.
    const size = 16384;
    const reflected = peer.call<Record<string, number>>('reflect', { tag: '1000', size, count: WARMUP + CYCLES });
    await peer.event('posted');
    const src = fillPattern(Buffer.alloc(size), 1);
    const dst = Buffer.alloc(size);
    let region: MemoryRegion | undefined;
    let rssAfterWarmup = 0;
    for (let i = 0; i < WARMUP + CYCLES; i++) {
      if (i === WARMUP) rssAfterWarmup = process.memoryUsage().rss;
      // Every 100 cycles: a fresh mapped region, received into through a span, then unmapped.
      if (i % 100 === 0) {
        region?.close();
        region = MemoryRegion.map(context, new ArrayBuffer(size));
      }
      const into = i % 2 === 0 ? dst : region!.span();
      const back = worker.tagRecv(into, 1001n, EXACT);
      await ep.tagSend(1000n, src);
      const info = await back;
      if (info.length !== size) throw new Error(`cycle ${i}: got ${info.length} bytes`);
    }
    const view = new Uint8Array(region!.buffer!);
    expect(Buffer.compare(view, src)).toBe(0);
    expect(Buffer.compare(dst, src)).toBe(0);
    region!.close();
    const growth = process.memoryUsage().rss - rssAfterWarmup;
    console.log(`RSS growth over ${CYCLES} round trips after warm-up: ${(growth / 1048576).toFixed(1)} MiB`);
    expect(growth).toBeLessThan(RSS_BOUND);
    expect(nativeStats()).toMatchObject({ requests: 0, regions: 0 });
    expect(worker.stats()).toMatchObject({ liveRequests: 0, liveRegions: 0, liveEndpoints: 1 });
    expect(await reflected).toMatchObject({ requests: 0, regions: 0 });
    await ep.close();
    await worker.close();
    context.close();
    expect(nativeStats()).toEqual({ contexts: 0, workers: 0, endpoints: 0, listeners: 0, regions: 0, rkeys: 0, requests: 0 });
  }, 180_000);
});
