// The import graph of core/ and codegen/ as a house (docs/architecture.md): no file imports itself
// back through others, and every area imports only areas on lower floors.
//
//   floor 7  cli        core/cli/* (the commands; `gen` comes from codegen)
//   floor 6  codegen    codegen/** (reads schemas, writes modules; never loads the runtime)
//   floor 5  rpc        core/rpc/** (client, server, movers)
//   floor 4  compute    core/compute/** (streams, events, kernels; what the movers wait for)
//   floor 3  tensor     core/tensor/**
//   floor 2  binding    core/native.ts, core/package-root.ts, core/cuda.ts, core/cuda-driver.ts, core/ucx/**
//   floor 1  schema     core/schema/** (the descriptor contract of tensor, rpc and codegen)
//            abort      core/abort.ts (one abort listener per signal, for the binding and the calls)
//            wire       core/wire/** (frames and tags; bytes only)
//            args       core/cli/command-line.ts (argv parsing, shared by cli and codegen's gen)
//   floor 0  errors     core/errors.ts
//            lists      core/live-list.ts (collections of live objects that keep V8's scavenges cheap)
//
// core/index.ts (the runtime entry, `gdrpc`) gathers the areas' indexes and must never reach
// codegen or the CLI. Type-only imports count: a type circle is still two files that cannot be
// read one without the other.
import { describe, expect, it } from 'vitest';
import { fileURLToPath } from 'node:url';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { cyclePath, cycles, importEdges, sourceFiles, type ImportEdge } from './import-graph.ts';
import { moduleState } from './module-state.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));
const edges = importEdges(root, sourceFiles(root, ['core', 'codegen']));

const FLOORS: Record<string, number> = { errors: 0, lists: 0, abort: 1, schema: 1, wire: 1, args: 1, binding: 2, tensor: 3, compute: 4, rpc: 5, codegen: 6, cli: 7 };

/** The folders of core/rpc by floor (docs/architecture.md): a call's life from the process's
 *  runtime up to the two sides. */
const RPC_FLOORS: Record<string, number> = { runtime: 0, connection: 1, movers: 2, remote: 3, transfer: 4, call: 5, client: 6, server: 7 };

function areaOf(file: string): string {
  if (file === 'core/index.ts') return 'entry';
  if (file === 'core/errors.ts') return 'errors';
  if (file === 'core/abort.ts') return 'abort';
  if (file === 'core/live-list.ts') return 'lists';
  if (file === 'core/cli/command-line.ts') return 'args';
  if (file.startsWith('codegen/')) return 'codegen';
  if (['core/native.ts', 'core/package-root.ts', 'core/cuda.ts', 'core/cuda-driver.ts'].includes(file) || file.startsWith('core/ucx/')) return 'binding';
  const area = /^core\/([^/]+)\//.exec(file)?.[1];
  if (area === undefined || !(area in FLOORS)) throw new Error(`${file} belongs to no area: give it one in ${import.meta.url}`);
  return area;
}


function describeCycles(found: string[][], from: ImportEdge[]): string {
  return found.map((scc) => `${scc.length} files: ${cyclePath(from, scc)}`).join('\n');
}

describe('import graph', () => {
  it('reads the sources (multi-line, type-only and dynamic imports included)', () => {
    expect(edges.length).toBeGreaterThan(200);
    expect(edges.some((e) => e.dynamic)).toBe(true);
    expect(edges.some((e) => e.typeOnly)).toBe(true);
    expect(edges.every((e) => !e.to.startsWith('..'))).toBe(true);
  });

  it('has no circle of value imports', () => {
    const runtime = edges.filter((e) => !e.typeOnly);
    const found = cycles(runtime);
    expect(found, describeCycles(found, runtime)).toEqual([]);
  });

  it('has no circle of imports, type-only ones included', () => {
    const found = cycles(edges);
    expect(found, describeCycles(found, edges)).toEqual([]);
  });

  it('imports only downward between areas', () => {
    const upward = edges.filter((e) => {
      const [a, b] = [areaOf(e.from), areaOf(e.to)];
      return a !== 'entry' && a !== b && FLOORS[b]! >= FLOORS[a]!;
    }).map((e) => `${e.from} (${areaOf(e.from)}) -> ${e.to} (${areaOf(e.to)})`);
    expect(upward).toEqual([]);
  });

  it('imports only downward between the folders of core/rpc', () => {
    const folderOf = (file: string) => /^core\/rpc\/([^/]+)\//.exec(file)?.[1];
    const files = new Set(edges.flatMap((e) => [e.from, e.to]));
    const folders = new Set([...files].map(folderOf).filter((f) => f !== undefined));
    expect([...folders].sort(), 'a new folder needs a floor in RPC_FLOORS').toEqual(Object.keys(RPC_FLOORS).sort());
    const upward = edges.filter((e) => {
      const [a, b] = [folderOf(e.from), folderOf(e.to)];
      return a !== undefined && b !== undefined && a !== b && RPC_FLOORS[b]! >= RPC_FLOORS[a]!;
    }).map((e) => `${e.from} -> ${e.to}${e.typeOnly ? ' (type)' : ''}`);
    expect(upward).toEqual([]);
  });

  it('keeps codegen and the CLI out of the runtime entry', () => {
    const reached = new Set<string>(['core/index.ts']);
    const queue = ['core/index.ts'];
    while (queue.length > 0) {
      const file = queue.shift()!;
      for (const e of edges) if (e.from === file && !reached.has(e.to)) { reached.add(e.to); queue.push(e.to); }
    }
    expect([...reached].filter((f) => ['codegen', 'cli', 'args'].includes(areaOf(f)))).toEqual([]);
  });
});

/** Files whose module state is a cache of facts that never change for the process: the loaded
 *  native addon and the package's own directory. */
const STATE_EXEMPT_FILES = ['core/native.ts', 'core/package-root.ts'];

/** Module-level state that stays, with why; this list may only shrink ("file: name"). */
const ALLOWED_STATE: Record<string, string> = {
  // The one process-wide slot STYLE.md 14 leaves: which Runtime a Client or Server without
  // `runtime` uses. Everything that slot leads to is the Runtime's and closes with it.
  'core/rpc/runtime/runtime.ts: #default': 'the default runtime of the process',
  // A tensor's producer is a property of the tensor, not of a runtime: producedOn() takes no
  // runtime, a tensor may be sent on several, and the entry dies with the tensor (weak key). It
  // would be a Tensor field if the tensor area could name compute's CudaEvent (it is below).
  'core/compute/ready.ts: producers': 'per-tensor producer event, weakly keyed',
  // The callbacks waiting on a signal are the signal's: one listener for any number of them
  // (EventTarget's add is O(listeners)); weakly keyed, gone with the signal, shared by every
  // worker and call that uses it.
  'core/abort.ts: waiting': 'per-signal abort callbacks, weakly keyed',
  // Facts about one endpoint that UCX fixes at connect: weakly keyed, gone with the endpoint.
  'core/rpc/movers/path.ts: cache': "per-endpoint transport names, weakly keyed",
  // A pool region's packed rkey, fixed for the region's life: weakly keyed, gone with the region.
  'core/rpc/movers/rma.ts: packed': 'per-region packed rkey, weakly keyed',
  // A brand: which objects are TensorPools (tensor.ts may not import pool.ts). Weakly keyed, it
  // says what an object is, never how much of anything the process holds.
  'core/tensor/tensor.ts: pools': 'TensorPool brand, weakly keyed',
  // A mark on a tensor a caller lends to a pull as its destination (`into`): a fact about the
  // tensor for the receive that may fail, weakly keyed, never a count of anything the process holds.
  'core/rpc/remote/lent.ts: lent': 'caller-lent destination mark, weakly keyed',
  // Strings derived from a method descriptor (its short name), made once instead of on every
  // call: weakly keyed, checked against the descriptor's fields, gone with the descriptor.
  'core/rpc/call/method-name.ts: names': 'per-descriptor method name, weakly keyed',
  // The entries of an option rule table, listed once instead of on every call's option check:
  // weakly keyed by the (constant) table.
  'core/tensor/options.ts: entriesOf': 'per-rule-table entry list, weakly keyed',
  'core/tensor/options.ts: verdicts': 'per-rule-table misspelling verdicts by key, weakly keyed, at most 1,024 keys a table',
  // Host-name lookups run in libuv's thread pool, which is the process's whatever its runtimes:
  // the cap on those in flight (and their queue) is the process's too.
  'core/rpc/connection/resolve.ts: lookupsRunning': "lookups in flight in libuv's process-wide thread pool",
};

describe('module-level state', () => {
  it('the scan finds let, mutated collections and mutable statics, nothing else', () => {
    const source = [
      'let a = 1;', 'export let b: number;', 'const m = new Map<string, number>();', 'm.set("x", 1);',
      'const frozen = new Set([1]);', 'frozen.has(1);', '// let commented = 1;', 'function f() {', '  let local = 1;', '}',
      'class C {', '  static #slot: C | undefined;', '  static readonly LIMIT = 1;', '  static create(): C { return new C(); }', '}',
    ].join('\n');
    expect(moduleState(source).map((s) => `${s.kind} ${s.name}`)).toEqual(['let a', 'let b', 'collection m', 'static #slot']);
  });

  it('core/ keeps process-wide state in the Runtime, apart from the listed exceptions', () => {
    const found = sourceFiles(root, ['core'])
      .filter((file) => !STATE_EXEMPT_FILES.includes(file))
      .flatMap((file) => moduleState(readFileSync(join(root, file), 'utf8')).map((state) => `${file}: ${state.name}`));
    expect(found.sort()).toEqual(Object.keys(ALLOWED_STATE).sort());
  });
});
