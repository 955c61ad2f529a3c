// `npm run bench -- call-split [--calls N] [--rounds R] --json <file>`: where a small call's time
// goes. Client and server (bench/rpc-peer.ts) stamp every tag send and receive with the monotonic
// clock both share (bench/call-split-hook.ts), and each call splits into five parts:
//   client  the call made until its request is handed to the tag send
//   request that send until the server's receive settled (UCX, the server's wake-up, the binding)
//   server  that receive until the reply is handed to the tag send (decode, dispatch, handler, encode)
//   reply   that send until the client's receive settled
//   settle  that receive until the call's promise resolved (decode, the caller's continuation)
// Medians and p90 per part, under polling after work off, adaptive and a fixed 1,000 µs window,
// alternating round by round. The stamps cost each tag operation one promise hop.
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Stamp } from './call-split-hook.ts';
import { describeMachine, percentile, positiveFlag } from './machine.ts';
import { gdrpcSystem } from './rpc-gdrpc.ts';

const SETTINGS: Array<number | 'adaptive'> = [0, 'adaptive', 1000];
const PARTS = ['client', 'request', 'server', 'reply', 'settle', 'call'] as const;
type Part = typeof PARTS[number];

/** Each call's five parts, from the client's calls and stamps and the server's stamps. A call
 *  whose four operations are not all found inside it (a stamp lost at a toggle) is left out. */
export function splitCalls(calls: ReadonlyArray<{ start: number; end: number }>, client: readonly Stamp[], server: readonly Stamp[]): Record<Part, number[]> {
  const sorted = (list: readonly Stamp[], kind: Stamp['kind'], key: 'posted' | 'settled'): Stamp[] => list.filter((s) => s.kind === kind).sort((a, b) => a[key] - b[key]);
  const clientSends = sorted(client, 'send', 'posted');
  const clientRecvs = sorted(client, 'recv', 'settled');
  const serverRecvs = sorted(server, 'recv', 'settled');
  const serverSends = sorted(server, 'send', 'posted');
  const parts = Object.fromEntries(PARTS.map((part) => [part, [] as number[]])) as Record<Part, number[]>;
  const at = { cs: 0, cr: 0, sr: 0, ss: 0 };
  const next = (list: Stamp[], from: keyof typeof at, key: 'posted' | 'settled', after: number): Stamp | undefined => {
    while (at[from] < list.length && list[at[from]]![key] < after) at[from] += 1;
    return list[at[from]];
  };
  for (const call of calls) {
    const send = next(clientSends, 'cs', 'posted', call.start);
    if (send === undefined || send.posted > call.end) continue;
    const received = next(serverRecvs, 'sr', 'settled', send.posted);
    if (received === undefined || received.settled > call.end) continue;
    const reply = next(serverSends, 'ss', 'posted', received.settled);
    if (reply === undefined || reply.posted > call.end) continue;
    const back = next(clientRecvs, 'cr', 'settled', reply.posted);
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

async function measureSetting(setting: number | 'adaptive', calls: number): Promise<Record<string, unknown>> {
  // Imported here, not at the top: loading the hook wraps the binding's tag operations in this
  // process, which only this bench should do (splitCalls is also used on its own, in tests).
  const { nowUs, record, stamps } = await import('./call-split-hook.ts');
  const dir = mkdtempSync(join(tmpdir(), 'gdrpc-call-split-'));
  const hook = fileURLToPath(new URL('./call-split-hook.ts', import.meta.url));
  const system = await gdrpcSystem(setting, {
    GDRPC_CALL_SPLIT_OUT: join(dir, 'server'),
    NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import tsx --import ${hook}`.trim(),
  });
  const made: Array<{ start: number; end: number }> = [];
  let server: Stamp[];
  try {
    try {
      for (let i = 0; i < 1000; i += 1) await system.ping();
      process.kill(system.peerPid!, 'SIGUSR2');
      record(true);
      // The signal is handled on the peer's next loop turn; 50 ms is many turns.
      await new Promise((resolve) => setTimeout(resolve, 50));
      for (let i = 0; i < calls; i += 1) {
        const start = nowUs();
        await system.ping();
        made.push({ start, end: nowUs() });
      }
    } finally {
      record(false);
      await system.close();
    }
    // The peer writes its stamps when it exits; one killed for lingering (peer.end) writes none.
    const file = readdirSync(dir).find((name) => name.startsWith('server.'));
    server = file === undefined ? [] : JSON.parse(readFileSync(join(dir, file), 'utf8')) as Stamp[];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  if (server.length === 0) throw new Error('call-split: the server wrote no stamps (its hook did not load, or it did not exit by itself)');
  const parts = splitCalls(made, stamps, server);
  return { setting, calls, matched: parts.call.length, parts_us: summarize(parts) };
}

/** p50 and p90 of every part (each list is sorted in place: percentile() reads a sorted list). */
export function summarize(parts: Record<Part, number[]>): Record<Part, { p50: number; p90: number }> {
  return Object.fromEntries(PARTS.map((part) => {
    const sorted = parts[part].sort((a, b) => a - b);
    return [part, { p50: percentile(sorted, 50), p90: percentile(sorted, 90) }];
  })) as Record<Part, { p50: number; p90: number }>;
}

export async function runCallSplitBench(opts: { json?: string; flags: string[] }): Promise<object> {
  const calls = positiveFlag(opts.flags, '--calls', 5000);
  const rounds = positiveFlag(opts.flags, '--rounds', 2);
  const results: Array<Record<string, unknown>> = [];
  for (let round = 0; round < rounds; round += 1) {
    for (const setting of SETTINGS) {
      const r = await measureSetting(setting, calls);
      results.push({ round, ...r });
      const p = r.parts_us as Record<Part, { p50: number }>;
      console.log(`round ${round}, busyPollUs ${setting}: ${PARTS.map((part) => `${part} ${p[part].p50.toFixed(1)}`).join(', ')} us (p50; ${r.matched} of ${calls} calls split)`);
    }
  }
  return {
    machine: describeMachine(),
    what: `small calls between two processes split into parts by monotonic stamps of every tag send and receive in both (bench/call-split-hook.ts): client (call to its send), request (send to the server's receive settled), server (receive to the reply's send), reply (send to the client's receive settled), settle (receive to the call resolved); p50 and p90 of ${calls} calls per setting of busyPollUs (0, 'adaptive', 1000), alternating over ${rounds} rounds; each stamp costs its operation one promise hop`,
    results,
  };
}
