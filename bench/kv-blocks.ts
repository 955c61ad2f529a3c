// `npm run bench -- kv-blocks [--blocks N] [--block-bytes B] [--rounds R] --json <file>`: KV-cache
// hand-over as the decode side sees it. An owner process makes N blocks of B bytes on its device
// (cuda:1 when there are two GPUs, else the one GPU, else host memory) and hands them out as
// @remote handles; this process pulls them into a pool on its own device:
//   - block table: the blocks as one region (one handle), pulled by index into a cache of this
//     side's, permuted on both sides (RemoteTensor.pullBlocks), with a new connection, and
//     again over a connection made before (connect, via); and direct (the owner grants its
//     allocation's CUDA IPC handle, one kernel here reads every block: docs/gpu.md "Direct pulls"),
//     with a new connection and over one made before;
//   - pullAll: RemoteTensor.pullAll, one connection, many pulls in flight;
//   - pull each: a pull() per handle (a connection each), 32 at a time (the owner's default
//     maxConnectionsPerAddress is 64);
//   - one tensor: the same bytes as one handle, one pull (the transfer alone, no per-block cost);
//   - and, on a GPU, the raw copy of the same bytes between the same devices (PyTorch), the ceiling.
// Each round runs every way once, in turn.
import { fileURLToPath } from 'node:url';
import { cuda } from '../core/cuda.ts';
import { callInfo, Client, RemoteTensor, Runtime, type Device, type OwnerConnection, type Tensor } from '../core/index.ts';
import { SinkDescriptor } from './schemas/gen/gpu_sink.ts';
import { runPython } from './gpu-external.ts';
import { describeMachine, positiveFlag, type BenchResult } from './machine.ts';
import { spawnPeer } from '../test/support/peer.ts';

const KiB = 1024;
const EACH_IN_FLIGHT = 32;
const BLOCK_TABLE_REPEATS = 3;

/** Runs `work` over `items` with `lanes` of it in flight. */
async function inLanes<T, R>(items: readonly T[], lanes: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(lanes, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await work(items[i]!);
    }
  }));
  return out;
}

/** Clears `cache`, so that a pull that moved nothing would fail checkBlocks. */
function zero(cache: Tensor): void {
  if (cache.device === 'cpu') cache.bytes().fill(0);
  else {
    cuda.memset(cache.address, 0, cache.byteLength);
    cuda.synchronize(Number(cache.device.slice('cuda:'.length)));
  }
}

/** Fails unless a few blocks of `cache` hold what the owner filled them with (block i: i & 0xff)
 *  where the table put them. */
function checkBlocks(cache: Tensor, blockBytes: number, from: Uint32Array, to: Uint32Array): void {
  for (const k of [0, 1, from.length >> 1, from.length - 1]) {
    const first = new Uint8Array(1);
    const last = new Uint8Array(1);
    const at = to[k]! * blockBytes;
    if (cache.device === 'cpu') {
      first[0] = cache.bytes()[at]!;
      last[0] = cache.bytes()[at + blockBytes - 1]!;
    } else {
      cuda.copy(first, cache.address + BigInt(at), 1);
      cuda.copy(last, cache.address + BigInt(at + blockBytes - 1), 1);
    }
    const expected = from[k]! & 0xff;
    if (first[0] !== expected || last[0] !== expected) throw new Error(`block table: block ${from[k]} at ${to[k]} holds ${first[0]}..${last[0]}, not ${expected}`);
  }
}

export async function runKvBlocksBench(opts: { json?: string; flags: string[] }): Promise<object> {
  const gpus = cuda.available() ? cuda.deviceCount() : 0;
  const local: Device = gpus > 0 ? 'cuda:0' : 'cpu';
  const remote: Device = gpus > 1 ? 'cuda:1' : local;
  const count = positiveFlag(opts.flags, '--blocks', gpus > 0 ? 4096 : 512);
  const blockBytes = positiveFlag(opts.flags, '--block-bytes', 32 * KiB);
  const rounds = positiveFlag(opts.flags, '--rounds', 3);
  const total = count * blockBytes;
  // The peer receives the blocks sent by value into its pool (the pulls need none there).
  const peer = await spawnPeer<{ port: number }>(fileURLToPath(new URL('./gpu-peer.ts', import.meta.url)), { args: [remote, String(total + (1 << 20))] });
  const runtime = Runtime.create();
  const pool = runtime.createPool({ device: local, bytes: 2 * total + (1 << 20) });
  const samples: Record<string, number[]> = { 'block table': [], 'block table, connected': [], 'block table, direct': [], 'block table, direct, connected': [], pullAll: [], 'pull each': [], 'one tensor': [], 'send by value': [] };
  // The block table: block k of the owner's region lands at block at[k] of this side's cache, both
  // fixed pseudo-random permutations (a paged KV cache on both sides).
  const order = (seed: number): Uint32Array => {
    const out = Uint32Array.from({ length: count }, (_, k) => k);
    let state = seed;
    for (let k = count - 1; k > 0; k -= 1) {
      state = (Math.imul(state, 1103515245) + 12345) >>> 0;
      const j = state % (k + 1);
      [out[k], out[j]] = [out[j]!, out[k]!];
    }
    return out;
  };
  const tableFrom = order(7);
  const tableTo = order(11);
  const cache = pool.allocate([count, blockBytes], 'u8');
  const paths = new Set<string>();
  let client: Client | undefined;
  try {
    client = await Client.connect({ host: '127.0.0.1', port: peer.ready.port }, { runtime, poolBytes: 0 });
    const handles = async (n: number, bytes: number): Promise<RemoteTensor[]> =>
      ((await client!.unary(SinkDescriptor.methods.blocks, { count: n, bytes })).items as Array<{ h: RemoteTensor }>).map((item) => item.h);
    const timed = async (name: string, handlesOf: () => Promise<RemoteTensor[]>, pull: (hs: RemoteTensor[]) => Promise<Tensor[]>): Promise<void> => {
      const hs = await handlesOf();
      const started = process.hrtime.bigint();
      const tensors = await pull(hs);
      samples[name]!.push(Number(process.hrtime.bigint() - started) / 1e3);
      const seen = tensors[0] === undefined ? undefined : callInfo(tensors[0])?.transfers[0];
      if (seen !== undefined) paths.add(`${name}: ${seen.mover}/${seen.path}`);
      for (const t of tensors) t.release();
    };
    // One block-table pull timed under `name`, into a cache zeroed first, every block checked.
    const tablePull = async (name: string, region: RemoteTensor, extra: { via?: OwnerConnection; direct?: boolean }): Promise<void> => {
      zero(cache);
      const started = process.hrtime.bigint();
      await region.pullBlocks(tableFrom, { into: cache, at: tableTo, ...extra });
      samples[name]!.push(Number(process.hrtime.bigint() - started) / 1e3);
      checkBlocks(cache, blockBytes, tableFrom, tableTo);
    };
    for (let round = 0; round <= rounds; round += 1) {  // round 0 warms up and is not kept
      // The block table three times a round: the first after the other ways of the round before
      // (4,096 connections of pull each closing at the owner) is the noisiest.
      for (let again = 0; again < BLOCK_TABLE_REPEATS; again += 1) {
        const region = (await client.unary(SinkDescriptor.methods.region, { count, bytes: blockBytes })).h as RemoteTensor;
        await tablePull('block table', region, {});
        const seen = callInfo(cache)?.transfers;
        if (seen !== undefined && seen.length > 0) paths.add(`block table: ${seen[0]!.mover}/${seen[0]!.path}, ${seen.length} parts`);
        // The same over a connection made before (a decode worker keeps one to its prefill worker).
        const owner = await region.connect();
        try {
          await tablePull('block table, connected', region, { via: owner });
          // Direct: one kernel here reads the blocks from the owner's memory (a GPU owner that
          // grants it; elsewhere this is the two-sided pull again), over the connection and
          // then with one of its own (its own mapping too).
          await tablePull('block table, direct, connected', region, { via: owner, direct: true });
          const how = callInfo(cache)?.transfers[0];
          if (how !== undefined) paths.add(`block table, direct: ${how.mover}/${how.path}${how.protocol?.startsWith('gdrpc direct') === true ? ' (direct)' : ' (two-sided)'}`);
          await tablePull('block table, direct', region, { direct: true });
        } finally {
          await owner.close();
        }
      }
      await timed('pullAll', () => handles(count, blockBytes), (hs) => RemoteTensor.pullAll(hs, { pool }));
      await timed('pull each', () => handles(count, blockBytes), (hs) => inLanes(hs, EACH_IN_FLIGHT, (h) => h.pull({ pool })));
      await timed('one tensor', () => handles(1, total), (hs) => RemoteTensor.pullAll(hs, { pool }));
      // The other direction, by value: this side's blocks as one list argument (gathered tag
      // transfers, up to 1,024 blocks a message), received into the peer's pool.
      const blocks = Array.from({ length: count }, () => pool.allocate([blockBytes], 'u8'));
      try {
        const started = process.hrtime.bigint();
        const sent = await client.unary(SinkDescriptor.methods.sinkList, { xs: blocks });
        samples['send by value']!.push(Number(process.hrtime.bigint() - started) / 1e3);
        const seen = callInfo(sent)?.transfers[0];
        if (seen !== undefined) paths.add(`send by value: ${seen.mover}/${seen.path}, ${seen.gathered ?? 1} a message`);
      } finally {
        for (const block of blocks) block.release();
      }
      if (round === 0) for (const s of Object.values(samples)) s.length = 0;
      else console.log(`round ${round}: ${Object.entries(samples).map(([k, v]) => `${k} ${(v.at(-1)! / 1000).toFixed(2)} ms`).join(', ')}`);
    }
  } finally {
    cache.release();
    await client?.close();
    pool.close({ force: true });
    await runtime.close();
    await peer.dispose();
  }
  const rows: BenchResult[] = Object.entries(samples).map(([name, us]) => {
    const sorted = [...us].sort((a, b) => a - b);
    const p50 = sorted[Math.floor(sorted.length / 2)]!;
    return {
      system: `gdrpc ${name}`, workload: name === 'one tensor' ? `one tensor of ${total} B` : `${count} blocks of ${blockBytes} B`,
      bytes: total, p50_us: p50, p99_us: sorted.at(-1)!, ops_per_s: (count * 1e6) / p50, gbps: total / p50 / 1e3, iterations: us.length,
    };
  });
  let copy: { results: BenchResult[]; skipped: unknown[] } = { results: [], skipped: [{ system: 'cuda-copy', reason: 'no GPU' }] };
  if (gpus > 0) copy = await runPython('gpu_copy_bench.py', ['--sizes', String(total), ...(gpus > 1 ? ['--peer'] : [])], 'cuda-copy', 120_000, (line) => console.log(line));
  for (const r of rows) console.log(`${r.system}: ${r.workload} in ${(r.p50_us! / 1000).toFixed(2)} ms, ${r.gbps!.toFixed(2)} GB/s, ${Math.round(r.ops_per_s!)} blocks/s`);
  return {
    machine: describeMachine(),
    what: `${count} blocks of ${blockBytes} B pulled from ${remote} (another process) into a pool on ${local}: the blocks of one region by a block table (RemoteTensor.pullBlocks, permuted on both sides, ${BLOCK_TABLE_REPEATS} times a round, each with a new connection and again over one made before, then both direct), RemoteTensor.pullAll, a pull() each (${EACH_IN_FLIGHT} in flight), the same bytes as one tensor; the blocks sent from ${local} to ${remote} by value as one list argument; and the raw copy; ${rounds} rounds after a warm-up`,
    paths: [...paths], results: rows, copy: copy.results, skipped: copy.skipped,
  };
}
