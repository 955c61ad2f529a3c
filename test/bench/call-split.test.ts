// bench/call-split.ts: a small call split into its five parts from the stamps of both processes.
import { describe, expect, it } from 'vitest';
import { splitCalls, summarize } from '../../bench/call-split.ts';
import type { Stamp } from '../../bench/call-split-hook.ts';

const send = (posted: number, settled = posted + 1): Stamp => ({ kind: 'send', posted, settled });
const recv = (posted: number, settled: number): Stamp => ({ kind: 'recv', posted, settled });

describe('call-split', () => {
  it('splits each call into client, request, server, reply and settle, which add up to the call', () => {
    // Call 1: 100..200; call 2: 300..420. The client's receives are posted before the call.
    const calls = [{ start: 100, end: 200 }, { start: 300, end: 420 }];
    const client = [send(104), recv(50, 190), send(310), recv(195, 400)];
    const server = [recv(0, 130), send(150), recv(140, 340), send(360)];
    const parts = splitCalls(calls, client, server);
    expect(parts).toEqual({
      client: [4, 10], request: [26, 30], server: [20, 20], reply: [40, 40], settle: [10, 20], call: [100, 120],
    });
    for (let k = 0; k < 2; k += 1) {
      expect(parts.client[k]! + parts.request[k]! + parts.server[k]! + parts.reply[k]! + parts.settle[k]!).toBe(parts.call[k]);
    }
  });

  it('leaves out a call whose server stamps are missing, and ignores stamps outside every call', () => {
    const calls = [{ start: 100, end: 200 }, { start: 300, end: 400 }];
    const client = [send(10), recv(0, 20), send(105), recv(60, 180), send(305), recv(185, 390)];
    // The server lost the first call's stamps (recording began after it).
    const server = [recv(0, 5), send(8), recv(150, 320), send(350)];
    const parts = splitCalls(calls, client, server);
    expect(parts.call).toEqual([100]);
    expect(parts.request).toEqual([15]);
    expect(parts.server).toEqual([30]);
  });

  it('summarizes each part by its median and 90th percentile, whatever order the calls came in', () => {
    const part = [50, 10, 40, 20, 30, 90, 60, 80, 70, 100];
    const parts = { client: [...part], request: [...part], server: [...part], reply: [...part], settle: [...part], call: [3, 1, 2] };
    const summary = summarize(parts);
    expect(summary.client).toEqual({ p50: 50, p90: 90 });
    expect(summary.call.p50).toBe(2);
    expect(summary.server.p90).toBeGreaterThanOrEqual(summary.server.p50);
  });
});
