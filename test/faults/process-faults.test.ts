// Peers in separate processes killed (SIGKILL) or hung (SIGSTOP) during 256 MiB transfers, both
// directions, either side (issue 9, "The native progress loop can freeze JavaScript"). The
// survivor must end the affected call UNAVAILABLE within the liveness time, keep its event loop
// turning throughout, and not spin afterwards; a server must go on serving everyone else and get
// back every connection and pool block. Bounds are loose on purpose (the suite must pass on a
// loaded 2-core machine); the measured figures are printed.
import { afterEach, describe, expect, it } from 'vitest';
import { Client, Code, Tensor, type ClientOptions } from '../../core/index.ts';
import { TestClients } from '../rpc/fixtures/clients.ts';
import { disposePeers, type Peer } from '../support/peer.ts';
import { EchoDescriptor } from '../schemas/gen/rpc/echo.ts';
import { serverStats, type ServerStats } from '../rpc/fixtures/stats.ts';
import { armSignal, clientCall, disarmSignals, MiB, outcomeWithin, parseResult, startFaultClient, startFaultServer } from './fixtures/process-peers.ts';
import { SourceDescriptor } from '../schemas/gen/faults/source.ts';
import { cpuLoad, LoopWatch, type CpuLoad, type LoopReport } from './fixtures/process-watch.ts';

const SIZE = 256 * MiB;
/** Short, so that a hung peer is given up on within the test; both sides use the smaller value. */
const LIVENESS_MS = 3000;
/** Issue 9 asks for the liveness time + 1 s; the second second is room for a loaded machine. */
const SETTLE_SLACK_MS = 2000;
/** A loop frozen while a peer hangs shows a gap of the liveness time or more; a loaded machine's
 *  timers run late by tens of milliseconds. */
const MAX_TICK_GAP_MS = 1000;
/** A spinning thread wants a whole core however loaded the machine is; an idle process ~0. */
const MAX_IDLE_DEMAND = 0.5;
/** A call still pending this long after its peer's fault counts as hung. */
const HUNG_MS = 20_000;
const SERVER_OPTIONS = { poolBytes: 320 * MiB, maxTensorBytes: 512 * MiB };

type Direction = 'upload' | 'download';

const clients = new TestClients();
afterEach(async () => {
  disarmSignals();
  await clients.closeAll();
  await disposePeers();
});
const connect = (address: string, options?: ClientOptions): Promise<Client> => clients.connect(address, options);

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const cores = (load: CpuLoad): string => `cpu ${load.cpu.toFixed(2)}, demand ${load.demand.toFixed(2)} cores`;

/** One 256 MiB transfer from this process to the server (upload) or back (download). */
async function transfer(client: Client, direction: Direction): Promise<void> {
  if (direction === 'upload') {
    await client.unary(EchoDescriptor.methods.sink, { x: Tensor.fromArray(new Uint8Array(SIZE)) });
  } else {
    const result = await client.unary(SourceDescriptor.methods.produce, { n: SIZE, delayMs: 0 });
    (result.y as Tensor).release();
  }
}

interface ServerFault {
  outcome: string;
  /** From the signal to the call's end. */
  settleMs: number;
  loop: LoopReport;
  /** This process over one second after the call ended (the server still stopped, if it was). */
  after: CpuLoad;
  note: string;
}

/** Signals a fresh server part-way through a transfer of this process's. The moment is a
 *  fraction of a calibrating transfer's duration; a fault that came after the call had finished
 *  is tried again, earlier, on a new server. */
async function faultServerDuring(direction: Direction, signal: NodeJS.Signals): Promise<ServerFault> {
  for (let attempt = 1, fraction = 0.4; ; attempt += 1, fraction /= 2) {
    const server = await startFaultServer(SERVER_OPTIONS);
    const calibrationMs = await calibrate(server.address, direction);
    const client = await connect(server.address, { livenessMs: LIVENESS_MS, poolBytes: 0 });
    const armed = await armSignal(server.child.pid!, signal, calibrationMs * fraction);
    const loop = new LoopWatch();
    const dueAt = armed.fire();
    const outcome = await outcomeWithin(transfer(client, direction), HUNG_MS);
    const settledAt = performance.now();
    const watched = loop.stop();
    const note = `attempt ${attempt}: ${direction} of ${Math.round(calibrationMs)} ms, ${signal} at ${Math.round(calibrationMs * fraction)} ms`;
    if (outcome === 'OK' && attempt < 4) {
      console.log(`[process-faults] ${note} came after the call ended; again, earlier`);
      server.kill();
      continue;
    }
    await sleep(250); // lets the failed call's clean-up finish before measuring idleness
    const after = await cpuLoad();
    server.kill();
    return { outcome, settleMs: Math.round(settledAt - dueAt), loop: watched, after, note };
  }
}

/** Milliseconds one transfer to or from a fresh server takes once warm. A client of its own, with
 *  the default liveness, pays for the first call (pool pages, the produce buffer: seconds on a
 *  loaded machine), so that the short liveness under test applies to the faulted call only. */
async function calibrate(address: string, direction: Direction): Promise<number> {
  const client = await Client.connect(address, { poolBytes: 0 });
  try {
    await transfer(client, direction);
    const started = performance.now();
    await transfer(client, direction);
    return performance.now() - started;
  } finally {
    await client.close();
  }
}

describe('a server process fails while this process moves 256 MiB', () => {
  for (const direction of ['upload', 'download'] as const) {
    for (const signal of ['SIGKILL', 'SIGSTOP'] as const) {
      it(`${signal} mid-${direction}: UNAVAILABLE within the liveness time, timers tick, no spin after`, async () => {
        const fault = await faultServerDuring(direction, signal);
        console.log(`[process-faults] server ${signal} mid-${direction}: ${fault.outcome} ${fault.settleMs} ms after the signal ` +
          `(liveness ${LIVENESS_MS} ms); ${fault.loop.ticks} ticks in ${fault.loop.elapsedMs} ms, max gap ${fault.loop.maxGapMs} ms; ` +
          `afterwards ${cores(fault.after)} (${fault.note})`);
        expect(fault.outcome).toBe(Code.UNAVAILABLE);
        expect(fault.settleMs).toBeLessThan(LIVENESS_MS + SETTLE_SLACK_MS);
        expect(fault.loop.maxGapMs).toBeLessThan(MAX_TICK_GAP_MS);
        expect(fault.after.demand).toBeLessThan(MAX_IDLE_DEMAND);
      }, 120_000);
    }
  }
});

/** What must come back to where it was once a client is gone: connections, calls, pool blocks, native handles. */
function holdings(stats: ServerStats): Record<string, unknown> {
  const { endpoints, requests, regions, rkeys } = stats.native;
  return {
    connections: stats.connections, activeCalls: stats.activeCalls,
    pools: stats.pools.map((pool) => ({ used: pool.used, liveTensors: pool.liveTensors })),
    native: { endpoints, requests, regions, rkeys },
  };
}

/** Sends `command` to a fault client and SIGKILLs it `delayMs` after `trigger` (a line of the
 *  client's or the server's); true when the kill came before the call had ended. */
async function killDuring(client: Peer, command: string, trigger: { peer: Peer; line: RegExp }, delayMs: number): Promise<boolean> {
  const armed = await armSignal(client.child.pid!, 'SIGKILL', delayMs);
  const triggered = trigger.peer.nextLine(trigger.line);
  client.send(command);
  await triggered;
  armed.fire();
  await client.exited;
  return !/^RESULT /m.test(client.output());
}

/** Whether a new client can connect to `address` and have a call served ("OK", or what it got). */
async function freshClientServed(address: string): Promise<string> {
  // Tracked: closed by the clean-up should this take longer than we wait.
  const served = clients.connect(address, { connectTimeoutMs: 10_000 }).then(async (client) => {
    try {
      await client.unary(EchoDescriptor.methods.ping, { n: 1 });
    } finally {
      await client.close();
    }
  });
  return outcomeWithin(served, 15_000);
}

/** Pings the server through `client` one after another for `ms`: how many were served, the
 *  first that was not, the slowest. A server frozen by one of its peers serves none. */
async function pingFor(client: Client, ms: number): Promise<{ served: number; failed?: string; slowestMs: number }> {
  let served = 0;
  let slowestMs = 0;
  const until = performance.now() + ms;
  while (performance.now() < until) {
    const started = performance.now();
    const outcome = await outcomeWithin(client.unary(EchoDescriptor.methods.ping, { n: served }), HUNG_MS);
    slowestMs = Math.max(slowestMs, Math.round(performance.now() - started));
    if (outcome !== 'OK') return { served, failed: outcome, slowestMs };
    served += 1;
  }
  return { served, slowestMs };
}

describe('a client process fails while the server moves 256 MiB', () => {
  for (const direction of ['upload', 'download'] as const) {
    it(`clients SIGKILLed mid-${direction}, 10 times: fresh clients are served after each, nothing leaks, no spin`, async () => {
      const server = await startFaultServer(SERVER_OPTIONS);
      const observer = await connect(server.address);
      const command = direction === 'upload' ? `upload ${SIZE}` : `download ${SIZE} 0`;
      // A client that completes the transfer: warms the server and calibrates the moments.
      const probe = await startFaultClient({ address: server.address, poolBytes: 0 });
      await clientCall(probe, command);
      const calibrationMs = (await clientCall(probe, command)).ms;
      probe.kill();
      await expect.poll(async () => (await serverStats(observer)).connections, { timeout: 15_000 }).toBe(1);
      const baseline = holdings(await serverStats(observer));

      const kills = 10;
      let landed = 0;
      // Each client starts while the one before it is killed (a start takes a second or more).
      const start = (): Promise<Peer> => {
        const starting = startFaultClient({ address: server.address, poolBytes: 0 });
        starting.catch(() => { /* killed by the clean-up when the test failed first */ });
        return starting;
      };
      let next = start();
      for (let kill = 0; kill < kills; kill += 1) {
        const client = await next;
        if (kill + 1 < kills) next = start();
        // Spread over the transfer: 10% to 90% of its calibrated length, from its start.
        const delayMs = calibrationMs * (0.1 + 0.2 * (kill % 5));
        const trigger = direction === 'upload' ? { peer: client, line: /^CALLING/ } : { peer: server, line: /^PRODUCING/ };
        if (await killDuring(client, command, trigger, delayMs)) landed += 1;
        const served = await freshClientServed(server.address);
        if (served !== 'OK') {
          const load = await cpuLoad(server.child.pid!);
          expect.fail(`kill ${kill + 1}: after a client was SIGKILLed ${Math.round(delayMs)} ms into a ${direction} of ` +
            `${calibrationMs} ms, a fresh client got ${served}; server ${cores(load)}`);
        }
      }
      const backAt = performance.now();
      await expect.poll(async () => holdings(await serverStats(observer)), { timeout: 20_000, interval: 200 }).toEqual(baseline);
      const backMs = Math.round(performance.now() - backAt);
      const load = await cpuLoad(server.child.pid!);
      console.log(`[process-faults] ${kills} clients SIGKILLed during a ${direction} of ${calibrationMs} ms (${landed} before their call ended): ` +
        `server back to baseline ${backMs} ms after the last; server ${cores(load)}`);
      expect(load.demand).toBeLessThan(MAX_IDLE_DEMAND);
    }, 240_000);
  }

  for (const moment of ['before its result leaves', 'part-way through its result'] as const) {
    it(`a client SIGSTOPped ${moment}: other clients are served meanwhile, and it is dropped after the liveness time`, async () => {
      const server = await startFaultServer(SERVER_OPTIONS);
      const observer = await connect(server.address);
      const baseline = holdings(await serverStats(observer));
      const stopped = await startFaultClient({ address: server.address, livenessMs: LIVENESS_MS, poolBytes: 0 });
      await clientCall(stopped, `download ${SIZE} 0`);
      const downloadMs = (await clientCall(stopped, `download ${SIZE} 0`)).ms;
      // Before: the handler holds its result for a second, the client is stopped at once.
      const before = moment === 'before its result leaves';
      const armed = await armSignal(stopped.child.pid!, 'SIGSTOP', before ? 0 : downloadMs * 0.3);
      const producing = server.nextLine(/^PRODUCING/);
      const result = stopped.nextLine(/^RESULT /, 60_000);
      result.catch(() => { /* awaited below; rejects if the clean-up kills the client first */ });
      stopped.send(`download ${SIZE} ${before ? 1000 : 0}`);
      await producing;
      const stoppedAt = armed.fire();
      await sleep(stoppedAt - performance.now() + 50);
      const endedFirst = /^RESULT /m.test(stopped.output().split('CALLING download').at(-1) ?? '');

      // Two seconds of the stop: the server's connection to the stopped client stays open all along.
      const pings = await pingFor(observer, 2000);
      // The stopped client's connection goes, and with it whatever the server held for it.
      await expect.poll(async () => holdings(await serverStats(observer)), { timeout: LIVENESS_MS + 15_000, interval: 100 }).toEqual(baseline);
      const droppedMs = Math.round(performance.now() - stoppedAt);
      const load = await cpuLoad(server.child.pid!);
      const fresh = await freshClientServed(server.address);
      stopped.resume();
      const resumed = parseResult(await result);
      console.log(`[process-faults] client SIGSTOP ${moment} (download ${downloadMs} ms${endedFirst ? '; its call had already ended' : ''}): ` +
        `${pings.served} pings served in 2 s${pings.failed !== undefined ? `, then one ${pings.failed}` : ''}, slowest ${pings.slowestMs} ms; ` +
        `dropped within ${droppedMs} ms (liveness ${LIVENESS_MS} ms); server ${cores(load)}; a fresh client: ${fresh}; ` +
        `the resumed client's call: ${resumed.outcome}`);
      expect(pings.failed).toBeUndefined();
      expect(pings.served).toBeGreaterThanOrEqual(10);
      expect(droppedMs).toBeLessThan(LIVENESS_MS + SETTLE_SLACK_MS);
      expect(load.demand).toBeLessThan(MAX_IDLE_DEMAND);
      expect(fresh).toBe('OK');
      if (!endedFirst) expect(resumed.outcome).toBe(Code.UNAVAILABLE);
    }, 120_000);
  }
});
