// A server process for the golden fixtures: serves each fixture's generated service with handlers
// that compute something checkable from their arguments. Announces its port when ready.
import { Server, Tensor } from 'gdrpc';
import { Collections } from '../fixtures/collections/expected/collections.ts';
import { Docs } from '../fixtures/docs/expected/docs.ts';
import { Mode } from '../fixtures/imports/expected/common/block.ts';
import { Pipeline } from '../fixtures/imports/expected/pipeline.ts';
import { Library } from '../fixtures/remote/expected/remote.ts';
import { Scalars } from '../fixtures/scalars/expected/scalars.ts';
import { Streams } from '../fixtures/streaming/expected/streaming.ts';
import { Color, Trees, type Node } from '../fixtures/structs_enums/expected/structs_enums.ts';
import { Moe } from '../fixtures/struct_dims/expected/struct_dims.ts';
import { Tensors } from '../fixtures/tensors/expected/tensors.ts';
import { announceReady } from '../../support/ready-line.ts';

const server = Server.create();

Scalars.register(server, {
  roundTrip: (args) => ({ value: { ...args.value, name: args.value.name.toUpperCase() }, total: BigInt(args.value.c) + BigInt(args.count) }),
  nothing: () => ({}),
});

Collections.register(server, {
  lists: (args) => ({ count: args.ids.length + args.nested.flat().length + args.items.length }),
  maps: (args) => ({ names: [...Object.keys(args.byName), ...Object.keys(args.counts)].sort() }),
  optionals: (args) => {
    const found = args.maybeItems?.find((item) => item !== undefined && item !== null);
    return found ? { found } : {};
  },
});

Trees.register(server, {
  paint(args) {
    const colors: Record<string, Color> = {};
    let painted = 0;
    const walk = (node: Node, path: string): void => {
      painted++;
      colors[path] = node.leaf.color === Color.UNSET ? args.color : node.leaf.color;
      node.children.forEach((child, i) => walk(child, `${path}.${i}`));
    };
    walk(args.root, 'root');
    return { painted, colors };
  },
});

Tensors.register(server, {
  all: (args) => ({ out: args.l }),
  layers: (args) => (args.x ? { y: args.x } : {}),
});

Streams.register(server, {
  async *count(args) {
    for (let n = 1; n <= args.upTo; n++) yield { n };
  },
  async sum(messages) {
    const total = new Float32Array(8);
    let count = 0;
    for await (const m of messages) {
      const rows = m.x.toArray() as Float32Array;
      rows.forEach((v, i) => { total[i % 8]! += v; });
      count++;
    }
    return { total: Tensor.fromArray(total), messages: count };
  },
  async ticks(messages) {
    let n = 0;
    for await (const _ of messages) n++;
    return { n };
  },
  async *empty() {
    yield {};
    yield {};
  },
  named: () => ({}),
});

Library.register(server, {
  /** Pulls the remote argument and checks every element is what the caller wrote (0x3c00, 1.0 in f16). */
  async store(args) {
    const data = await args.data.pull({ into: Tensor.empty([...args.data.shape], args.data.dtype) });
    const ok = (data.toArray() as Uint16Array).every((v) => v === 0x3c00) && args.meta.x === 7;
    return { ok };
  },
  lend: () => { throw new Error('lend returns remote results, which the caller cannot pull: not exercised'); },
  plain: (args) => ({ plain: { x: args.book?.pages.length ?? -1 } }),
  /** Streams pages whose data the caller pulls while the stream is open. */
  async *browse(args) {
    for (let id = args.from; id < args.from + 3; id++) {
      yield { page: { id, data: Tensor.fromArray(new Uint16Array(2 * 16 * 64).fill(id), { shape: [2, 16, 64], dtype: 'bf16' }) } };
    }
  },
});

Pipeline.register(server, {
  run: (args) => ({ mode: args.blocks.length > 1 ? Mode.SAFE : Mode.FAST }),
});

Docs.register(server, { call: (args) => ({ ok: args.value.value > 0 }) });

/** Reports each route's own token count, so the caller sees every route bound its own `n`. */
Moe.register(server, {
  dispatch: (args) => ({ counts: args.routes.map((route) => route.tokens.shape[0]!), rows: args.hidden.shape[0]! }),
});

const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
announceReady({ port });
process.stdin.resume();
