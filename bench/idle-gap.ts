// `npm run bench -- idle-gap [--samples N] [--gaps 0,1,5,20,100] --json <file>`: what a call costs
// when it comes after the processes sat idle (a service's sporadic calls) against one that comes
// right after the last, beside two things that are not gdrpc at all, all in one run:
//   js        a fixed piece of JavaScript in this process (msgpack, no I/O, no other process)
//   node-tcp  a round trip of a small message over Node's own TCP to a child process (both sleep
//             in between: epoll, as Node does)
//   gdrpc     a small call to bench/rpc-peer.ts, default settings (TCP, the adaptive window)
// For each gap (ms idle before each sample) the three alternate sample by sample, so that a
// machine that changes speed over the run changes all three; back to back (gap 0), each system's
// samples run in a row. If the JavaScript alone slows down
// after a gap as much as the calls do, what the gap costs is the machine's (a core that idled
// lost its caches, or runs slower at first), not anything gdrpc or Node does on the wire.
import { fork, type ChildProcess } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { Packr } from 'msgpackr';
import { Client } from '../core/index.ts';
import { BenchDescriptor } from './schemas/gen/rpc_bench.ts';
import { spawnPeer } from '../test/support/peer.ts';
import { describeMachine, percentile, positiveFlag } from './machine.ts';

const SYSTEMS = ['js', 'node-tcp', 'gdrpc'] as const;
type System = typeof SYSTEMS[number];
const WARM_UP = 5000;

/** The flags' gap list (ms, integers from 0), or the default. */
export function gapsFrom(flags: string[]): number[] {
  const at = flags.indexOf('--gaps');
  if (at < 0) return [0, 1, 5, 20, 100];
  const text = flags[at + 1] ?? '';
  const gaps = text.split(',').map(Number);
  if (text === '' || gaps.some((gap) => !Number.isInteger(gap) || gap < 0 || gap > 10_000)) {
    throw new Error(`--gaps takes a comma-separated list of whole milliseconds from 0 to 10000, got ${JSON.stringify(text)}`);
  }
  return gaps;
}

/** The JavaScript step: a REQUEST-sized object packed and unpacked eight times. */
function jsStep(): () => Promise<void> {
  const packr = new Packr();
  const body = { svc: 'bench.Bench', m: 'ping', a: { x: 1, y: [1, 2, 3] }, win: 64, md: { trace: 'abc' } };
  let sink = 0;
  return async () => {
    for (let i = 0; i < 8; i += 1) sink += (packr.unpack(packr.pack(body)) as { win: number }).win;
    if (sink < 0) throw new Error('unreachable');
  };
}

/** A round trip of 32 bytes to an echoing child over TCP loopback. */
async function nodeTcp(): Promise<{ step: () => Promise<void>; close: () => Promise<void> }> {
  const child: ChildProcess = fork(fileURLToPath(new URL('./tcp-echo.mjs', import.meta.url)), [], { execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (value) => resolve(value as number));
    child.once('exit', (code) => reject(new Error(`idle-gap: the echo child exited (${code}) before it listened`)));
  });
  const socket: Socket = connect(port, '127.0.0.1');
  socket.setNoDelay(true);
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  const message = Buffer.alloc(32, 7);
  return {
    step: () => new Promise<void>((resolve) => {
      let got = 0;
      const onData = (chunk: Buffer): void => {
        got += chunk.length;
        if (got < message.length) return;
        socket.off('data', onData);
        resolve();
      };
      socket.on('data', onData);
      socket.write(message);
    }),
    close: async () => {
      socket.destroy();
      child.disconnect();
      await new Promise((resolve) => child.once('exit', resolve));
    },
  };
}

export async function runIdleGapBench(opts: { flags: string[] }): Promise<object> {
  const samples = positiveFlag(opts.flags, '--samples', 100);
  const gaps = gapsFrom(opts.flags);
  const peer = await spawnPeer<{ port: number }>(fileURLToPath(new URL('./rpc-peer.ts', import.meta.url)), { args: ['gdrpc'] });
  const tcp = await nodeTcp();
  let client: Client | undefined;
  try {
    client = await Client.connect({ host: '127.0.0.1', port: peer.ready.port });
    const gdrpc = client;
    const steps: Record<System, () => Promise<unknown>> = {
      js: jsStep(),
      'node-tcp': tcp.step,
      gdrpc: () => gdrpc.unary(BenchDescriptor.methods.ping, {}),
    };
    // Compiled and connected before anything is timed (bench/warm.ts says why it takes thousands).
    for (const system of SYSTEMS) for (let i = 0; i < WARM_UP; i += 1) await steps[system]();
    const results: Array<Record<string, unknown>> = [];
    const back: Partial<Record<System, number>> = {};
    for (const gap of gaps) {
      const times: Record<System, number[]> = { js: [], 'node-tcp': [], gdrpc: [] };
      const sample = async (system: System): Promise<void> => {
        const started = process.hrtime.bigint();
        await steps[system]();
        times[system].push(Number(process.hrtime.bigint() - started) / 1e3);
      };
      if (gap === 0) {
        // Back to back: each system's samples in a row, right after a run of its own (between
        // samples of the others, a peer would sit idle for their time).
        for (const system of SYSTEMS) {
          for (let i = 0; i < 100; i += 1) await steps[system]();
          for (let i = 0; i < samples; i += 1) await sample(system);
        }
      } else {
        for (let i = 0; i < samples; i += 1) {
          for (const system of SYSTEMS) {
            await new Promise((resolve) => setTimeout(resolve, gap));
            await sample(system);
          }
        }
      }
      for (const system of SYSTEMS) {
        const sorted = times[system].sort((a, b) => a - b);
        const p50 = percentile(sorted, 50);
        if (gap === 0) back[system] = p50;
        const row = { system, gap_ms: gap, samples, p10_us: percentile(sorted, 10), p50_us: p50, p90_us: percentile(sorted, 90), ...(back[system] !== undefined ? { p50_over_back_to_back: p50 / back[system]! } : {}) };
        results.push(row);
        console.log(`gap ${String(gap).padStart(4)} ms  ${system.padEnd(8)}  p50 ${p50.toFixed(1).padStart(7)} us  (p10 ${row.p10_us.toFixed(1)}, p90 ${row.p90_us.toFixed(1)})${row.p50_over_back_to_back !== undefined ? `  ${row.p50_over_back_to_back.toFixed(1)}x back to back` : ''}`);
      }
    }
    return {
      machine: describeMachine(),
      what: `p10/p50/p90 of ${samples} samples per gap (ms idle before each sample; 0: right after the one before) of: js, 8 msgpack pack+unpack of a REQUEST-sized object in this process; node-tcp, a 32-byte round trip over Node's TCP loopback to an echoing child; gdrpc, a small call to bench/rpc-peer.ts (default settings); the three alternate sample by sample after a gap, and run their samples in a row at gap 0; p50_over_back_to_back is each system's p50 at this gap over its p50 at gap 0`,
      gaps, results,
    };
  } finally {
    await client?.close();
    await tcp.close();
    await peer.dispose();
  }
}
