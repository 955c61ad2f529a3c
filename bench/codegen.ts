// Code generator benchmarks.
//
// 1. Per-call cost of the generated layer, in one process with no network: ShardWorker.forward
//    (four arguments: two f16 tensors [8, 4096], a u32, an f32). A fake Client stands in for the
//    transport; its unary() does what the real Client.unary does before any I/O, validateFields
//    with the generated descriptor, then returns a resolved promise. Measured per call:
//      - validators: the generated validateShardWorkerForwardArgs alone;
//      - direct:     fake.unary(ShardWorkerDescriptor.methods.forward, args) (runtime call, validating);
//      - stub:       ShardWorker.client(fake).forward(args) (generated stub -> the same fake.unary);
//    stub overhead = stub - direct; stub + validators = stub overhead + validators (goal < 2 µs).
// 2. Generation time for a synthetic set of 200 services (20 files of 10 services, 4 methods
//    each, structs, enums and an import), in memory: compile (parse, symbols, model, checks) and
//    emit (ts-morph) separately; the first run is cold (module JIT and ts-morph project start-up).
import { Tensor, type Client } from 'gdrpc';
import { validateFields } from 'gdrpc';
import { compile } from '../codegen/compile.ts';
import { emitModules } from '../codegen/emit/module.ts';
import { ShardWorker, ShardWorkerDescriptor, validateShardWorkerForwardArgs } from '../schemas/gen/tensor_parallel.ts';
import { describeMachine, percentile, type BenchResult } from './machine.ts';

const BATCHES = 25;
const CALLS = 20_000;

/** ns per call of each function, one sample per batch; the functions take turns batch by batch
 *  so that drift on a shared machine (other processes, GC, frequency) hits them alike. */
async function perCall(fns: Array<() => unknown>): Promise<number[][]> {
  const samples: number[][] = fns.map(() => []);
  for (let b = -3; b < BATCHES; b++) {
    for (const [k, fn] of fns.entries()) {
      let last: unknown;
      const start = process.hrtime.bigint();
      for (let i = 0; i < CALLS; i++) last = fn();
      const ns = Number(process.hrtime.bigint() - start) / CALLS;
      await last;
      if (b >= 0) samples[k]!.push(ns);
    }
  }
  return samples.map((s) => s.sort((a, b) => a - b));
}

function row(workload: string, samplesNs: number[], what: string): BenchResult {
  const p50 = percentile(samplesNs, 50) / 1000;
  return {
    system: 'gdrpc codegen', workload, bytes: 0,
    p50_us: round(p50), p99_us: round(percentile(samplesNs, 99) / 1000), ops_per_s: Math.round(1e6 / p50), gbps: null, what,
  };
}

const round = (x: number, digits = 3): number => Number(x.toFixed(digits));

async function stubCost(): Promise<BenchResult[]> {
  const result = { partial: { rank: 0, y: Tensor.zeros([8, 4096], 'f16') } };
  const settled = Promise.resolve(result);
  const fake = {
    unary(method: typeof ShardWorkerDescriptor.methods.forward, args: Record<string, unknown>) {
      validateFields(method.args, args, method.types, 'arguments');
      return settled;
    },
  } as unknown as Client;
  const args = { x: Tensor.zeros([8, 4096], 'f16'), residual: Tensor.zeros([8, 4096], 'f16'), layer: 3, scale: 0.5 };
  const stub = ShardWorker.client(fake);
  const method = ShardWorkerDescriptor.methods.forward;

  const [validators, direct, viaStub] = (await perCall([
    () => validateShardWorkerForwardArgs(args),
    () => fake.unary(method, args),
    () => stub.forward(args),
  ])) as [number[], number[], number[]];
  // Differences of medians; they can be slightly negative, which means "within the noise".
  const p50 = (s: number[]) => percentile(s, 50) / 1000;
  const overhead = p50(viaStub) - p50(direct);
  const derived = (workload: string, us: number, what: string): BenchResult =>
    ({ system: 'gdrpc codegen', workload, bytes: 0, p50_us: round(us), p99_us: null, ops_per_s: null, gbps: null, what });
  return [
    row('validators: ShardWorker.forward args (4 args, 2 tensors)', validators, 'generated validateShardWorkerForwardArgs -> validateFields, per call'),
    row('direct runtime call (fake transport)', direct, 'fake Client.unary: validateFields + resolved promise, called with the descriptor'),
    row('generated stub call (fake transport)', viaStub, 'ShardWorkerClient.forward -> the same fake Client.unary'),
    derived('stub overhead (stub - direct)', overhead, 'p50 difference: what the generated stub adds to a runtime call'),
    derived('stub + validators', overhead + p50(validators), 'stub overhead + validators p50; goal < 2 us'),
  ];
}

/** A synthetic schema set: `files` files of `perFile` services each; file 0 is imported by all. */
export function syntheticSchemas(files: number, perFile: number): Map<string, string> {
  const out = new Map<string, string>();
  out.set('/bench/common.gdrpc', 'package bench.common.v1;\n\nstruct Shared {\n  id: u64;\n  t: tensor<f16, [rows, 64]> @cuda;\n}\n');
  for (let f = 0; f < files; f++) {
    const lines = [`/// Synthetic file ${f}.`, `package bench.f${f}.v1;`, '', 'import "common.gdrpc";', ''];
    lines.push(`enum Kind${f} {\n  A = 0;\n  B = 1;\n  C = 2;\n}\n`);
    lines.push(`struct Item${f} {\n  name: string;\n  kind: Kind${f};\n  values: list<f32>;\n  shared: bench.common.v1.Shared?;\n}\n`);
    lines.push(`struct Batch${f} {\n  items: list<Item${f}>;\n  x: tensor<bf16, [batch, hidden = 1024]> @remote;\n  meta: map<string, string>;\n}\n`);
    for (let s = 0; s < perFile; s++) {
      lines.push(`/// Service ${s} of file ${f}.\nservice Svc${f}x${s} {`);
      lines.push(`  /// Unary with four arguments, two of them tensors.\n  rpc run(x: tensor<f16, [batch, hidden]> @cuda, w: tensor<f16, [hidden, out]> @cuda(1), layer: u32, scale: f32?) -> (y: tensor<f16, [batch, out]>);`);
      lines.push(`  rpc list(kind: Kind${f}, limit: u32) -> stream (item: Item${f});`);
      lines.push(`  rpc upload(stream batch: Batch${f}) -> (count: u64);`);
      lines.push('  rpc ping() -> ();');
      lines.push('}\n');
    }
    out.set(`/bench/f${f}.gdrpc`, lines.join('\n'));
  }
  return out;
}

async function generationTime(): Promise<BenchResult[]> {
  const sources = syntheticSchemas(20, 10);
  const host = { readFile: (abs: string) => sources.get(abs) };
  const entries = [...sources.keys()].filter((p) => p !== '/bench/common.gdrpc');
  const runs: Array<{ compile: number; emit: number; bytes: number; lines: number }> = [];
  for (let r = 0; r < 6; r++) {
    const t0 = performance.now();
    const result = compile(entries, { root: '/bench', host });
    const t1 = performance.now();
    if (result.diags.hasErrors) throw new Error(result.diags.format(result.sources));
    const files = emitModules(result.ir);
    const t2 = performance.now();
    const text = files.map((f) => f.text).join('');
    runs.push({ compile: t1 - t0, emit: t2 - t1, bytes: text.length, lines: text.split('\n').length });
  }
  const [cold, ...warm] = runs;
  const med = (pick: (r: (typeof runs)[number]) => number) => percentile(warm.map(pick).sort((a, b) => a - b), 50);
  const ms = (workload: string, value: number, what: string): BenchResult =>
    ({ system: 'gdrpc codegen', workload, bytes: cold!.bytes, p50_us: round(value * 1000, 0), p99_us: null, ops_per_s: null, gbps: null, ms: round(value, 1), what });
  const services = 200;
  return [
    ms('gen 200 services: compile (cold)', cold!.compile, 'parse + symbols + model + checks, first run in the process'),
    ms('gen 200 services: emit (cold)', cold!.emit, `ts-morph emit of 21 modules (${cold!.lines} lines), first run`),
    ms('gen 200 services: total (cold)', cold!.compile + cold!.emit, 'compile + emit, first run'),
    ms('gen 200 services: compile (warm)', med((r) => r.compile), 'median of 5 later runs'),
    ms('gen 200 services: emit (warm)', med((r) => r.emit), 'median of 5 later runs'),
    { ...ms('gen 200 services: total (warm)', med((r) => r.compile + r.emit), 'median of 5 later runs'), per_service_ms: round(med((r) => r.compile + r.emit) / services, 2) },
  ];
}

/** Runs both benchmarks; prints a table and returns `{machine, results}`. */
export async function runCodegenBench(_opts: { json?: string } = {}): Promise<object> {
  const results = [...(await stubCost()), ...(await generationTime())];
  for (const r of results) {
    const value = typeof r.ms === 'number' ? `${r.ms} ms` : `p50 ${r.p50_us} us${r.p99_us === null ? '' : `  p99 ${r.p99_us} us`}`;
    console.log(`${r.workload.padEnd(58)} ${value}`);
  }
  return { machine: describeMachine(), results };
}
