// A client process of bench/load.ts: opens the connections of its plan (argv[2], JSON) and announces
// ready (test/support/ready-line.ts); each 'run' keeps the plan's calls in flight for its seconds,
// lets them settle and sends back a ClientReport (a warm-up is a run whose report is dropped);
// 'close' closes and exits.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Client, GdrpcError, Tensor } from '../core/index.ts';
import { LatencyHistogram } from './load-histogram.ts';
import { countKind, type CallTally, type ClientPlan, type FromClient, type KindCount, type ToClient } from './load-protocol.ts';
import { StallMonitor } from './load-stall.ts';
import { BenchDescriptor } from './schemas/gen/rpc_bench.ts';
import { announceReady } from '../test/support/ready-line.ts';

const plan = JSON.parse(process.argv[2]!) as ClientPlan;
const send = (message: FromClient): void => { process.send!(message); };
/** Connections opened at once: a whole process's worth could outlast the handshake limit on a busy machine. */
const CONNECT_BATCH = 10;
const EXAMPLES_PER_CODE = 3;

/** Outcomes of one kind of call while the load runs. */
class Tally {
  ok = 0;
  okInWindow = 0;
  bytesInWindow = 0;
  readonly errors: Record<string, number> = {};
  readonly all = new LatencyHistogram();
  readonly okLatency = new LatencyHistogram();

  toData(): CallTally {
    return { ok: this.ok, okInWindow: this.okInWindow, bytesInWindow: this.bytesInWindow, errors: this.errors, all: this.all.toData(), okLatency: this.okLatency.toData() };
  }
}

const clients: Client[] = [];
let disconnects = 0;
const disconnectReasons = new Set<string>();
let clientErrors = 0;

async function connectAll(): Promise<void> {
  for (let i = 0; i < plan.connections; i += CONNECT_BATCH) {
    const batch = Array.from({ length: Math.min(CONNECT_BATCH, plan.connections - i) }, () => Client.connect(`127.0.0.1:${plan.port}`));
    for (const client of await Promise.all(batch)) {
      client.on('disconnect', (error) => {
        disconnects += 1;
        if (disconnectReasons.size < EXAMPLES_PER_CODE) disconnectReasons.add(`${error.code}: ${error.rawMessage}`);
      });
      client.on('error', () => { clientErrors += 1; });
      clients.push(client);
    }
  }
}

// One source buffer; each tensor call views a prefix of it (no copy, no registration to keep).
const source = new Uint8Array(plan.maxTensorBytes).fill(7);

/** Runs the load for `seconds`; resolves when every call has settled. */
async function runLoad(seconds: number): Promise<void> {
  const small = new Tally();
  const tensor = new Tally();
  const examples: Record<string, Record<string, KindCount>> = {};
  const stalls = new StallMonitor();
  const until = performance.now() + seconds * 1000;
  const lane = async (client: Client): Promise<void> => {
    while (performance.now() < until) {
      const withTensor = Math.random() < plan.tensorShare;
      const bytes = withTensor ? plan.minTensorBytes + Math.floor(Math.random() * (plan.maxTensorBytes - plan.minTensorBytes + 1)) : 0;
      const tally = withTensor ? tensor : small;
      const t0 = performance.now();
      let failed = false;
      try {
        if (withTensor) await client.unary(BenchDescriptor.methods.sink, { x: Tensor.fromArray(source.subarray(0, bytes)) }, { deadline: plan.deadlineMs });
        else await client.unary(BenchDescriptor.methods.ping, {}, { deadline: plan.deadlineMs });
      } catch (error) {
        failed = true;
        const e = GdrpcError.from(error);
        tally.errors[e.code] = (tally.errors[e.code] ?? 0) + 1;
        countKind(examples[e.code] ??= {}, e.rawMessage);
      }
      const t1 = performance.now();
      tally.all.add(t1 - t0);
      if (!failed) {
        tally.ok += 1;
        tally.okLatency.add(t1 - t0);
        if (t1 <= until) { tally.okInWindow += 1; tally.bytesInWindow += bytes; }
      } else {
        // A call that fails at once must not turn this loop into a spin that starves the event loop.
        await nextTurn();
      }
    }
  };
  await Promise.all(clients.flatMap((client) => Array.from({ length: plan.inflight }, () => lane(client))));
  stalls.stop();
  send({ kind: 'report', report: {
    small: small.toData(), tensor: tensor.toData(), disconnects, disconnectReasons: [...disconnectReasons], clientErrors, maxStallMs: stalls.maxMs,
    drainMs: Math.max(0, performance.now() - until), examples,
  } });
}

process.on('message', (message: ToClient) => {
  if (message.kind === 'run') {
    runLoad(message.seconds).catch((error: unknown) => send({ kind: 'failed', message: String(error) }));
  } else {
    void Promise.allSettled(clients.map((client) => client.close())).then(() => process.exit(0));
  }
});
// The parent is gone (crashed, killed): nobody will read the report.
process.on('disconnect', () => process.exit(1));

connectAll().then(() => announceReady(), (error: unknown) => {
  console.error(`load client: connecting: ${String(error)}`);
  process.exit(1);
});
