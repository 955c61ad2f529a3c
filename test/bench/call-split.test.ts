// bench/call-split.ts: a call split into its parts from the stamps of both processes.
import { describe, expect, it } from 'vitest';
import { splitCalls, splitTensorCalls, summarize, targetFrom } from '../../bench/call-split.ts';
import type { Stamp } from '../../bench/call-split-hook.ts';

const send = (posted: number, settled = posted + 1): Stamp => ({ kind: 'send', posted, settled });
const recv = (posted: number, settled: number): Stamp => ({ kind: 'recv', posted, settled });
const dataSend = (posted: number, settled: number): Stamp => ({ kind: 'send', op: 'data', posted, settled });
const dataRecv = (posted: number, settled: number): Stamp => ({ kind: 'recv', op: 'data', posted, settled });
const control = (stamp: Stamp): Stamp => ({ ...stamp, op: 'control' });

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
    expect(summary.client).toEqual({ p50: 50, p90: 90, count: 10 });
    expect(summary.call.count).toBe(3);
    expect(summary.call.p50).toBe(2);
    expect(summary.server.p90).toBeGreaterThanOrEqual(summary.server.p50);
  });

  it('splits a small call from control frames only: a payload stamp in between changes nothing', () => {
    const calls = [{ start: 100, end: 200 }];
    const client = [control(send(104)), dataSend(106, 108), control(recv(50, 190))];
    const server = [control(recv(0, 130)), dataRecv(131, 140), control(send(150))];
    expect(splitCalls(calls, client, server)).toEqual({ client: [4], request: [26], server: [20], reply: [40], settle: [10], call: [100] });
  });

  it('splits a tensor call into seven parts that add up to the call, and times the payload send', () => {
    // Call 1: 100..300. The request leaves at 110 and its payload at 112; the server receives the
    // request at 140, posts the payload's receive at 150, has it at 210 and replies at 230.
    // Call 2: 400..600; the client's SENT report of call 1 reached the server at 425, after call
    // 2's request was sent (420) and before that request arrived (450): the first control frame
    // received after the send would be the report, the last one before the payload's post is the
    // request.
    const calls = [{ start: 100, end: 300 }, { start: 400, end: 600 }];
    const client = [
      control(send(110)), dataSend(112, 215), control(recv(20, 260)), control(send(265)),
      control(send(420)), dataSend(421, 500), control(recv(300, 570)),
    ];
    const server = [
      control(recv(0, 140)), dataRecv(150, 210), control(send(230)),
      control(recv(141, 425)), control(recv(426, 450)), dataRecv(455, 520), control(send(540)),
    ];
    const parts = splitTensorCalls(calls, client, server);
    expect(parts).toEqual({
      client: [10, 20], request: [30, 30], post: [10, 5], payload: [60, 65], server: [20, 20], reply: [30, 30], settle: [40, 30],
      call: [200, 200], send: [103, 79],
    });
    for (let k = 0; k < 2; k += 1) {
      const sum = parts.client[k]! + parts.request[k]! + parts.post[k]! + parts.payload[k]! + parts.server[k]! + parts.reply[k]! + parts.settle[k]!;
      expect(sum).toBe(parts.call[k]);
    }
  });

  it('leaves out a tensor call whose payload receive was not stamped', () => {
    const calls = [{ start: 100, end: 300 }, { start: 400, end: 600 }];
    const client = [control(send(110)), dataSend(112, 215), control(recv(20, 260)), control(send(420)), dataSend(421, 500), control(recv(300, 570))];
    // Call 1's payload receive is missing (recording began inside it).
    const server = [control(recv(0, 140)), control(send(230)), control(recv(141, 450)), dataRecv(455, 520), control(send(540))];
    const parts = splitTensorCalls(calls, client, server);
    expect(parts.call).toEqual([200]);
    expect(parts.payload).toEqual([65]);
    expect(parts.request).toEqual([30]);
  });

  it('reads the tensor of the calls from --bytes and --device, and refuses what it cannot use', () => {
    expect(targetFrom([])).toEqual({ bytes: 0, device: 'cpu', sharedMemory: false });
    expect(targetFrom(['--bytes', '4096'])).toEqual({ bytes: 4096, device: 'cpu', sharedMemory: false });
    expect(targetFrom(['--calls', '10', '--bytes', '16777216', '--device', 'cuda:1'])).toEqual({ bytes: 16777216, device: 'cuda:1', sharedMemory: false });
    expect(targetFrom(['--shared-memory'])).toEqual({ bytes: 0, device: 'cpu', sharedMemory: true });
    expect(() => targetFrom(['--bytes', '0'])).toThrow(/--bytes takes a positive integer/);
    expect(() => targetFrom(['--bytes', '4096', '--device', 'gpu0'])).toThrow(/--device takes cpu or cuda:N, got "gpu0"/);
    expect(() => targetFrom(['--device', 'cuda:0'])).toThrow(/--device needs --bytes/);
  });
});
