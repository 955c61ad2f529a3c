// `npm run bench -- call-split [--calls N] [--rounds R] [--bytes B --device D] [--shared-memory] [--gap-ms G] --json <file>`:
// where a call's time goes. Client and server stamp every tag send and receive with the monotonic
// clock both share (bench/call-split-hook.ts). A small call (bench/rpc-peer.ts) splits into five
// parts:
//   client  the call made until its request is handed to the tag send
//   request that send until the server's receive settled (UCX, the server's wake-up, the binding)
//   server  that receive until the reply is handed to the tag send (decode, dispatch, handler, encode)
//   reply   that send until the client's receive settled
//   settle  that receive until the call's promise resolved (decode, the caller's continuation)
// With --bytes, each call carries one tensor of that size on --device (cpu or cuda:N, default cpu)
// through the tag mover to a Sink server (bench/gpu-peer.ts), and the server's part splits further:
//   post    the request received until the payload's receive is posted (allocation, checks)
//   payload that receive posted until it settled (the rendezvous, the copy, noticing its end)
//   server  the payload received until the reply is handed to the tag send
// and `send` is the client's payload send from its post to its settling (not a part of the sum).
// Medians and p90 per part, under polling after work off, adaptive and a fixed 1,000 µs window,
// alternating round by round. The stamps cost each tag operation one promise hop. With
// --shared-memory both processes talk over shared memory (RuntimeOptions.sharedMemory, trusted peers).
// With --gap-ms each call comes G ms after the one before ended (a service's sporadic calls: both
// processes idle in between) instead of right after it.
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Stamp } from './call-split-hook.ts';
import { describeMachine, percentile, positiveFlag } from './machine.ts';
import { warmUp } from './warm.ts';
import { gdrpcSystem } from './rpc-gdrpc.ts';
import { SinkDescriptor } from './schemas/gen/gpu_sink.ts';
import { Client, Runtime } from '../core/index.ts';
import { cuda } from '../core/cuda.ts';
import { isDevice, type Device } from '../core/tensor/device.ts';
import { receivingOn } from '../test/support/receive-placement.ts';
import { spawnPeer } from '../test/support/peer.ts';

const SETTINGS: Array<number | 'adaptive'> = [0, 'adaptive', 1000];
const PARTS = ['client', 'request', 'server', 'reply', 'settle', 'call'] as const;
type Part = typeof PARTS[number];
const TENSOR_PARTS = ['client', 'request', 'post', 'payload', 'server', 'reply', 'settle', 'call', 'send'] as const;
type TensorPart = typeof TENSOR_PARTS[number];

/** A call as the client made it, on the shared clock. */
interface Made { start: number; end: number }

/** The stamps of one kind and op, in order of `key`. Stamps without an op count as control. */
function byKind(list: readonly Stamp[], kind: Stamp['kind'], op: 'control' | 'data', key: 'posted' | 'settled'): Stamp[] {
  return list.filter((s) => s.kind === kind && (s.op ?? 'control') === op).sort((a, b) => a[key] - b[key]);
}

/** Walks a list sorted by `key` forward only: the first stamp at or after a time. */
function cursor(list: readonly Stamp[], key: 'posted' | 'settled'): (after: number) => Stamp | undefined {
  let at = 0;
  return (after) => {
    while (at < list.length && list[at]![key] < after) at += 1;
    return list[at];
  };
}

function emptyParts<P extends string>(names: readonly P[]): Record<P, number[]> {
  return Object.fromEntries(names.map((part) => [part, [] as number[]])) as Record<P, number[]>;
}

/** Each call's five parts, from the client's calls and stamps and the server's stamps (control
 *  frames only). A call whose four operations are not all found inside it (a stamp lost at a
 *  toggle) is left out. */
export function splitCalls(calls: readonly Made[], client: readonly Stamp[], server: readonly Stamp[]): Record<Part, number[]> {
  const clientSend = cursor(byKind(client, 'send', 'control', 'posted'), 'posted');
  const clientRecv = cursor(byKind(client, 'recv', 'control', 'settled'), 'settled');
  const serverRecv = cursor(byKind(server, 'recv', 'control', 'settled'), 'settled');
  const serverSend = cursor(byKind(server, 'send', 'control', 'posted'), 'posted');
  const parts = emptyParts(PARTS);
  for (const call of calls) {
    const send = clientSend(call.start);
    if (send === undefined || send.posted > call.end) continue;
    const received = serverRecv(send.posted);
    if (received === undefined || received.settled > call.end) continue;
    const reply = serverSend(received.settled);
    if (reply === undefined || reply.posted > call.end) continue;
    const back = clientRecv(reply.posted);
    if (back === undefined || back.settled > call.end) continue;
    parts.client.push(send.posted - call.start);
    parts.request.push(received.settled - send.posted);
    parts.server.push(reply.posted - received.settled);
    parts.reply.push(back.settled - reply.posted);
    parts.settle.push(call.end - back.settled);
    parts.call.push(call.end - call.start);
  }
  return parts;
}

/** Each tensor call's seven parts and its payload send. The server's payload receive anchors a
 *  call: its request is the last control frame the server received before posting that receive
 *  (the client's SENT report of the call before may arrive after the request was sent), and its
 *  reply the first control frame the server sent after the payload settled. A control message of
 *  its own (a SENT report or a keepalive that did not ride with a request) received between the
 *  request and that post would be taken for the request, moving a few µs from post to request;
 *  reports normally ride with the next request. A call whose operations are not all found inside
 *  it is left out. */
export function splitTensorCalls(calls: readonly Made[], client: readonly Stamp[], server: readonly Stamp[]): Record<TensorPart, number[]> {
  const clientSend = cursor(byKind(client, 'send', 'control', 'posted'), 'posted');
  const clientData = cursor(byKind(client, 'send', 'data', 'posted'), 'posted');
  const clientRecv = cursor(byKind(client, 'recv', 'control', 'settled'), 'settled');
  const serverRecvs = byKind(server, 'recv', 'control', 'settled');
  const serverData = cursor(byKind(server, 'recv', 'data', 'posted'), 'posted');
  const serverSend = cursor(byKind(server, 'send', 'control', 'posted'), 'posted');
  const parts = emptyParts(TENSOR_PARTS);
  let r = 0;
  for (const call of calls) {
    const send = clientSend(call.start);
    if (send === undefined || send.posted > call.end) continue;
    const data = clientData(call.start);
    if (data === undefined || data.posted > call.end) continue;
    const payload = serverData(send.posted);
    if (payload === undefined || payload.settled > call.end) continue;
    while (r + 1 < serverRecvs.length && serverRecvs[r + 1]!.settled <= payload.posted) r += 1;
    const received = serverRecvs[r];
    if (received === undefined || received.settled < send.posted || received.settled > payload.posted) continue;
    const reply = serverSend(payload.settled);
    if (reply === undefined || reply.posted > call.end) continue;
    const back = clientRecv(reply.posted);
    if (back === undefined || back.settled > call.end) continue;
    parts.client.push(send.posted - call.start);
    parts.request.push(received.settled - send.posted);
    parts.post.push(payload.posted - received.settled);
    parts.payload.push(payload.settled - payload.posted);
    parts.server.push(reply.posted - payload.settled);
    parts.reply.push(back.settled - reply.posted);
    parts.settle.push(call.end - back.settled);
    parts.call.push(call.end - call.start);
    parts.send.push(data.settled - data.posted);
  }
  return parts;
}

/** What each call carries: nothing (a ping to bench/rpc-peer.ts), or one tensor of `bytes` on
 *  `device` through the tag mover to bench/gpu-peer.ts, received on the same kind of device. */
export interface Target {
  bytes: number;
  device: Device;
  /** Both processes on shared memory instead of TCP loopback (RuntimeOptions.sharedMemory). */
  sharedMemory: boolean;
}

/** A client and its peer, one call at a time. */
interface Caller { peerPid: number; call(): Promise<unknown>; close(): Promise<void> }

async function tensorCaller(setting: number | 'adaptive', target: Target, peerEnv: Record<string, string>): Promise<Caller> {
  const poolBytes = target.bytes + (2 << 20);
  // What was set up, undone in reverse order on close and on any failure on the way; every step
  // runs even if one before it throws, and the first error is the one reported.
  const undo: Array<() => unknown> = [];
  const undoAll = async (): Promise<void> => {
    let first: unknown;
    for (const step of undo.splice(0).reverse()) {
      try {
        await step();
      } catch (error) {
        first ??= error;
      }
    }
    if (first !== undefined) throw first;
  };
  try {
    const peer = await spawnPeer<{ port: number }>(fileURLToPath(new URL('./gpu-peer.ts', import.meta.url)), {
      args: [target.device, String(poolBytes)],
      env: { GDRPC_BUSY_POLL_US: String(setting), UCX_MM_ERROR_HANDLING: target.sharedMemory ? 'y' : 'n', ...peerEnv },
    });
    undo.push(() => peer.end(5000));
    const runtime = Runtime.create({ busyPollUs: setting, sharedMemory: target.sharedMemory });
    undo.push(() => runtime.close());
    const pool = runtime.createPool({ device: target.device, bytes: poolBytes });
    undo.push(() => pool.close({ force: true }));
    const x = pool.allocate([target.bytes], 'u8');
    undo.push(() => x.release());
    if (target.device === 'cpu') x.bytes().fill(7);
    else cuda.memset(x.address, 7, target.bytes);
    const service = receivingOn(SinkDescriptor, target.device);
    const client = await Client.connect({ host: '127.0.0.1', port: (await peer.ready).port }, { poolBytes: 0, runtime });
    undo.push(() => client.close());
    return { peerPid: peer.pid!, call: () => client.unary(service.methods.sink, { x }, { mover: 'tag' }), close: undoAll };
  } catch (error) {
    await undoAll().catch(() => { /* the setup's error is the one to report */ });
    throw error;
  }
}

async function pingCaller(setting: number | 'adaptive', peerEnv: Record<string, string>, sharedMemory: boolean): Promise<Caller> {
  const system = await gdrpcSystem(setting, { peerEnv, sharedMemory });
  return { peerPid: system.peerPid!, call: () => system.ping(), close: () => system.close() };
}


async function measureSetting(setting: number | 'adaptive', calls: number, target: Target, gapMs: number): Promise<Record<string, unknown>> {
  // Imported here, not at the top: loading the hook wraps the binding's tag operations in this
  // process, which only this bench should do (splitCalls is also used on its own, in tests).
  const { nowUs, record, stamps } = await import('./call-split-hook.ts');
  const dir = mkdtempSync(join(tmpdir(), 'gdrpc-call-split-'));
  const hook = fileURLToPath(new URL('./call-split-hook.ts', import.meta.url));
  const peerEnv = {
    GDRPC_CALL_SPLIT_OUT: join(dir, 'server'),
    NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import tsx --import ${hook}`.trim(),
  };
  const made: Made[] = [];
  let server: Stamp[];
  try {
    const caller = target.bytes === 0 ? await pingCaller(setting, peerEnv, target.sharedMemory) : await tensorCaller(setting, target, peerEnv);
    try {
      // Until V8 has compiled the path in both processes (bench/warm.ts).
      await warmUp(() => caller.call(), { minCalls: 3000 });
      process.kill(caller.peerPid, 'SIGUSR2');
      record(true);
      // The signal is handled on the peer's next loop turn; 50 ms is many turns.
      await new Promise((resolve) => setTimeout(resolve, 50));
      for (let i = 0; i < calls; i += 1) {
        if (gapMs > 0) await new Promise((resolve) => setTimeout(resolve, gapMs));
        const start = nowUs();
        await caller.call();
        made.push({ start, end: nowUs() });
      }
    } finally {
      record(false);
      await caller.close();
    }
    // The peer writes its stamps when it exits; one killed for lingering (peer.end) writes none.
    const file = readdirSync(dir).find((name) => name.startsWith('server.'));
    server = file === undefined ? [] : JSON.parse(readFileSync(join(dir, file), 'utf8')) as Stamp[];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  if (server.length === 0) throw new Error('call-split: the server wrote no stamps (its hook did not load, or it did not exit by itself)');
  const parts = target.bytes === 0 ? summarize(splitCalls(made, stamps, server)) : summarize(splitTensorCalls(made, stamps, server));
  return { setting, calls, matched: parts.call.count, parts_us: parts };
}

/** p50 and p90 of every part, and how many calls it has (each list is sorted in place:
 *  percentile() reads a sorted list). */
export function summarize<P extends string>(parts: Record<P, number[]>): Record<P, { p50: number; p90: number; count: number }> {
  return Object.fromEntries(Object.entries<number[]>(parts).map(([part, list]) => {
    const sorted = list.sort((a, b) => a - b);
    return [part, { p50: percentile(sorted, 50), p90: percentile(sorted, 90), count: sorted.length }];
  })) as Record<P, { p50: number; p90: number; count: number }>;
}

/** The tensor the calls carry, from --bytes and --device (none, a small call, without --bytes), and
 *  --shared-memory. */
export function targetFrom(flags: string[]): Target {
  const bytes = flags.includes('--bytes') ? positiveFlag(flags, '--bytes', 0) : 0;
  const at = flags.indexOf('--device');
  const device: unknown = at < 0 ? 'cpu' : flags[at + 1];
  if (!isDevice(device)) throw new Error(`--device takes cpu or cuda:N, got ${JSON.stringify(device)}`);
  if (at >= 0 && bytes === 0) throw new Error('--device needs --bytes: a small call carries no tensor');
  return { bytes, device, sharedMemory: flags.includes('--shared-memory') };
}

export async function runCallSplitBench(opts: { json?: string; flags: string[] }): Promise<object> {
  const calls = positiveFlag(opts.flags, '--calls', 5000);
  const rounds = positiveFlag(opts.flags, '--rounds', 2);
  const target = targetFrom(opts.flags);
  const gapMs = opts.flags.includes('--gap-ms') ? positiveFlag(opts.flags, '--gap-ms', 0) : 0;
  const names: readonly string[] = target.bytes === 0 ? PARTS : TENSOR_PARTS;
  const results: Array<Record<string, unknown>> = [];
  for (let round = 0; round < rounds; round += 1) {
    for (const setting of SETTINGS) {
      const r = await measureSetting(setting, calls, target, gapMs);
      results.push({ round, ...r });
      const p = r.parts_us as Record<string, { p50: number }>;
      console.log(`round ${round}, busyPollUs ${setting}: ${names.map((part) => `${part} ${p[part]!.p50.toFixed(1)}`).join(', ')} us (p50; ${r.matched} of ${calls} calls split)`);
    }
  }
  const what = target.bytes === 0
    ? 'small calls between two processes split into parts by monotonic stamps of every tag send and receive in both (bench/call-split-hook.ts): client (call to its send), request (send to the server\'s receive settled), server (receive to the reply\'s send), reply (send to the client\'s receive settled), settle (receive to the call resolved)'
    : `calls carrying one ${target.bytes}-byte tensor from ${target.device} to ${target.device} through the tag mover, split into parts by monotonic stamps of every tag send and receive in both processes (bench/call-split-hook.ts): client (call to its request's send), request (that send to the server's receive settled), post (to the payload's receive posted), payload (that receive posted to settled), server (to the reply's send), reply (to the client's receive settled), settle (to the call resolved); send is the client's payload send from post to settle, not part of the sum`;
  return {
    machine: describeMachine(),
    what: `${what}${target.sharedMemory ? '; both processes on shared memory (RuntimeOptions.sharedMemory)' : ''}${gapMs > 0 ? `; each call ${gapMs} ms after the one before ended (both processes idle in between)` : ''}; p50 and p90 of ${calls} calls per setting of busyPollUs (0, 'adaptive', 1000), alternating over ${rounds} rounds; each stamp costs its operation one promise hop`,
    target,
    results,
  };
}
