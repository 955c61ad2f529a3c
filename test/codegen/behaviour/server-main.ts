// A server process serving the project's generated services (schemas/gen) with small handlers.
// Announces its port when ready; the behaviour test calls it through generated clients.
import { Client, Server, Tensor, type CallContext } from 'gdrpc';
import { Echo } from '../../../schemas/gen/echo.ts';
import { DecodeWorker, PrefillWorker, RequestState, type DecodeWorkerAcceptArgsReceived } from '../../../schemas/gen/kv_transfer.ts';
import { Precision, ShardWorker, type ShardWorkerForwardArgs, type ShardWorkerHandlers, type ShardWorkerReduceArgs } from '../../../schemas/gen/tensor_parallel.ts';
import { announceReady } from '../../support/ready-line.ts';

/** A class-based handler set: register must call its methods with `this` bound. */
class Shard implements ShardWorkerHandlers {
  readonly rank = 1;
  loaded = 0;

  info() {
    return { shard: { rank: this.rank, worldSize: 2, precision: Precision.F16, hiddenShard: 128 } };
  }

  loadWeights() {
    this.loaded++;
    return {};
  }

  /** Passes x through as this shard's partial (the arithmetic is not what is under test). */
  forward(args: ShardWorkerForwardArgs) {
    return { partial: { rank: this.rank, y: args.x } };
  }

  reduce(args: ShardWorkerReduceArgs) {
    return { y: args.partials[0]!.y };
  }
}

/** Blocks whose bytes encode (layer, index), so the puller can check it got the right ones. */
function kvBlocks(n: number) {
  return Array.from({ length: n }, (_, index) => {
    const keys = new Uint16Array(2 * 16 * 128).fill(0x100 + index);
    const values = new Uint16Array(2 * 16 * 128).fill(0x200 + index);
    return {
      layer: 0,
      index,
      keys: Tensor.fromArray(keys, { shape: [2, 16, 128], dtype: 'bf16' }),
      values: Tensor.fromArray(values, { shape: [2, 16, 128], dtype: 'bf16' }),
    };
  });
}

const server = Server.create();
Echo.register(server, {
  echo: (args) => ({ text: args.text, ...(args.payload ? { payload: args.payload } : {}) }),
  ping: () => ({}),
  async *repeat(args) {
    for (let index = 0; index < args.count; index++) yield { text: args.text, index };
  },
  async collect(messages) {
    let bytes = 0n;
    let chunks = 0;
    for await (const m of messages) {
      bytes += BigInt(m.chunk.byteLength);
      chunks++;
    }
    return { bytes, chunks };
  },
});
ShardWorker.register(server, new Shard());
PrefillWorker.register(server, {
  /** Hands the blocks to the decode worker as remote tensors; they stay valid while accept runs. */
  async prefill(args) {
    const blocks = kvBlocks(Math.ceil(args.tokens.shape[0]! / 16));
    const client = await Client.connect(args.decodeWorker);
    try {
      const { state } = await DecodeWorker.client(client).accept({ requestId: args.requestId, blocks, firstToken: 42 });
      return { firstToken: 42, blocks: blocks.length, state };
    } finally {
      await client.close();
    }
  },
});
DecodeWorker.register(server, {
  /** Pulls every handed-over block and checks its bytes; READY only when all are right. */
  async accept(args: DecodeWorkerAcceptArgsReceived, _ctx: CallContext) {
    for (const block of args.blocks) {
      // Both ways of pulling: into a new tensor, and into one this handler allocated.
      const keys = (await block.keys.pull()).toArray() as Uint16Array;
      const values = (await block.values.pull({ into: Tensor.empty([...block.values.shape], block.values.dtype) })).toArray() as Uint16Array;
      if (!keys.every((v) => v === 0x100 + block.index) || !values.every((v) => v === 0x200 + block.index)) {
        return { state: RequestState.PREFILLING };
      }
    }
    return { state: RequestState.READY };
  },
  /** Blocks by a block table over the caller's paged pool: READY when block k of what was
   *  pulled holds 0x300 + blockIds[k] throughout. */
  async acceptPaged(args) {
    const pulled = await args.pool.pullBlocks(args.blockIds);
    const values = pulled.toArray() as Uint16Array;
    const per = values.length / args.blockIds.length;
    const right = args.blockIds.every((id, k) => values.subarray(k * per, (k + 1) * per).every((v) => v === 0x300 + id));
    pulled.release();
    return { state: right ? RequestState.READY : RequestState.PREFILLING };
  },
  /** Blocks by value: READY when every block's bytes are right. */
  acceptCopies(args) {
    const right = args.blocks.every((block) => (block.keys.toArray() as Uint16Array).every((v) => v === 0x100 + block.index)
      && (block.values.toArray() as Uint16Array).every((v) => v === 0x200 + block.index));
    return { state: right ? RequestState.READY : RequestState.PREFILLING };
  },
  async *generate(args) {
    for (let i = 0; i < args.maxTokens; i++) yield { token: 1000 + i, state: i + 1 === args.maxTokens ? RequestState.DONE : RequestState.DECODING };
  },
});

const { port } = await server.listen({ host: '127.0.0.1', port: 0 });
announceReady({ port });
process.stdin.resume();
process.stdin.on('end', () => void server.shutdown({ graceMs: 100 }).then(() => process.exit(0)));
