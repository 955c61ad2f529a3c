// `npm run bench -- cuda-costs [--device cuda:N] [--json <file>]`: what the steps a CUDA tensor
// call takes that a host tensor call does not cost, each in a loop of its own in one process (no
// peer, no UCX): the device-wide synchronize a send of a tensor without a named producer waits
// for (compute/ready.ts), the receiving pool's allocation and release of a 16 MiB destination,
// the tensor's mapped span, and the stream-ordered alternative (an event recorded on the
// producing stream, then waited for). Medians of 5 rounds of 20,000 operations (the awaited row
// 5,000); each row is µs per operation.
import { cuda } from '../core/cuda.ts';
import { Runtime, type Tensor } from '../core/index.ts';
import { CudaStream } from '../core/compute/stream.ts';
import { producedOn, ProducerSync } from '../core/compute/ready.ts';
import { describeMachine, percentile } from './machine.ts';

const ROUNDS = 5;
const OPS = 20_000;

/** Calls `op` `n` times; one that returns a promise is awaited, one that does not runs without an
 *  await between calls. */
async function callsOf(op: () => void | Promise<void>, n: number): Promise<void> {
  for (let i = 0; i < n; i += 1) {
    const pending = op();
    if (pending !== undefined) await pending;
  }
}

/** µs per call of `op`, the median of ROUNDS rounds of `n` calls after a warm-up. */
async function perOp(op: () => void | Promise<void>, n = OPS): Promise<number> {
  await callsOf(op, 200);
  const rounds: number[] = [];
  for (let r = 0; r < ROUNDS; r += 1) {
    const start = process.hrtime.bigint();
    await callsOf(op, n);
    rounds.push(Number(process.hrtime.bigint() - start) / 1e3 / n);
  }
  return percentile(rounds.sort((a, b) => a - b), 50);
}

export async function runCudaCostsBench(opts: { flags: string[] }): Promise<object> {
  const at = opts.flags.indexOf('--device');
  const deviceName = at >= 0 ? opts.flags[at + 1]! : 'cuda:0';
  const index = Number(deviceName.slice('cuda:'.length));
  if (!cuda.available()) {
    console.log(`cuda-costs: skipped, CUDA is unavailable here (${cuda.unavailableReason() ?? 'no reason given'})`);
    return { machine: describeMachine(), what: 'cuda-costs', skipped: cuda.unavailableReason() ?? 'CUDA unavailable' };
  }
  const runtime = Runtime.default();
  const pool = runtime.createPool({ device: `cuda:${index}`, bytes: 64 << 20 });
  const x: Tensor = pool.allocate([16 << 20], 'u8');
  const stream = CudaStream.create(index);
  const done = stream.record();
  done.synchronize();
  const rows: Record<string, number> = {
    'cuCtxSynchronize, device idle': await perOp(() => cuda.synchronize(index)),
    'pool allocate + release, 16 MiB': await perOp(() => { pool.allocate([16 << 20], 'u8').release(); }),
    'tensor span (pool tensor)': await perOp(() => { x.span(); }),
    'ProducerSync.before, no producer named (a synchronize)': await perOp(() => { new ProducerSync().before(x); }),
    'stream record': await perOp(() => { stream.record(); }),
    'producedOn + ProducerSync.before, deferred': await perOp(() => { producedOn(x, stream); new ProducerSync().before(x, { defer: true }); }),
    'event synchronize, event done': await perOp(() => done.synchronize()),
    'await event.finished(), event done': await perOp(() => done.finished(), 5_000),
    'cuda.pointerInfo': await perOp(() => { cuda.pointerInfo(x.address); }),
  };
  for (const [name, us] of Object.entries(rows)) console.log(`${name.padEnd(56)} ${us.toFixed(2)} µs`);
  x.release();
  stream.close();
  pool.close({ force: true });
  return { machine: describeMachine(), what: 'cuda-costs', device: deviceName, rounds: ROUNDS, opsPerRound: OPS, usPerOp: rows };
}
