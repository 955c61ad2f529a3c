// Type-level tests of the generated API, checked by tsc from typecheck.test.ts and never run.
// Every `@ts-expect-error` line must fail to compile: tsc reports an unused directive otherwise.
import type { CallContext, Client, RemoteTensor, Server, Tensor } from 'gdrpc';
import { Echo, type EchoHandlers } from '../../../schemas/gen/echo.ts';
import { DecodeWorker, PrefillWorker, RequestState, type DecodeWorkerHandlers, type KvBlock } from '../../../schemas/gen/kv_transfer.ts';
import { Precision, ShardWorker, type ShardWorkerHandlers } from '../../../schemas/gen/tensor_parallel.ts';

declare const client: Client;
declare const server: Server;
declare const tensor: Tensor;
declare const ctx: CallContext;

export async function clients(): Promise<void> {
  const echo = Echo.client(client);
  const r = await echo.echo({ text: 'hi', payload: tensor }, { deadline: 100, mover: 'tag' });
  const text: string = r.text;
  // @ts-expect-error a result field has its declared type
  const wrong: number = r.text;
  // @ts-expect-error text must be a string
  await echo.echo({ text: 1 });
  // @ts-expect-error a required argument is missing
  await echo.echo({});
  // @ts-expect-error an unknown argument is rejected
  await echo.echo({ text: 'x', extra: true });
  // @ts-expect-error options come last and are CallOptions
  await echo.echo({ text: 'x' }, { mover: 'pigeon' });
  // @ts-expect-error no such method
  await echo.nope();
  await echo.ping();
  for await (const m of echo.repeat({ text: 'a', count: 3 })) void (m.index + 1);
  // @ts-expect-error a streamed result has the declared fields only
  for await (const m of echo.repeat({ text: 'a', count: 3 })) void m.missing;
  const summary = await echo.collect([{ chunk: tensor }]);
  const bytes: bigint = summary.bytes;
  // @ts-expect-error u64 is a bigint, not a number
  const asNumber: number = summary.bytes;
  // @ts-expect-error a client stream takes messages, not one object
  await echo.collect({ chunk: tensor });

  const shard = ShardWorker.client(client);
  const { partial } = await shard.forward({ x: tensor, residual: tensor, layer: 0, scale: 1 });
  const y: Tensor = partial.y;
  // @ts-expect-error a tensor argument needs a Tensor
  await shard.forward({ x: new Float32Array(4), residual: tensor, layer: 0, scale: 1 });
  // @ts-expect-error the residual tensor is required
  await shard.forward({ x: tensor, layer: 0, scale: 1 });
  // @ts-expect-error layer is a u32 (number)
  await shard.forward({ x: tensor, residual: tensor, layer: 0n, scale: 1 });
  const info = await shard.info();
  const precision: Precision = info.shard.precision;
  // @ts-expect-error an enum field takes one of its values
  const badPrecision: Precision = 7;

  // Remote tensors: a sender passes Tensors (or handles it received) for @remote fields.
  const prefill = PrefillWorker.client(client);
  const out = await prefill.prefill({ requestId: 'r', tokens: tensor, precision: Precision.BF16, decodeWorker: '127.0.0.1:1' });
  const state: RequestState = out.state;
  // @ts-expect-error a string is not a tensor
  await DecodeWorker.client(client).accept({ requestId: 'r', blocks: [{ layer: 0, index: 0, keys: 'k', values: tensor }], firstToken: 1 });
  void [text, wrong, bytes, asNumber, y, precision, badPrecision, state];
}

export function servers(): void {
  const echo: EchoHandlers = {
    echo: (args) => ({ text: args.text, payload: args.payload }),
    ping: async () => ({}),
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
  };
  Echo.register(server, echo);

  const badResult: Pick<EchoHandlers, 'echo'> = {
    // @ts-expect-error a handler must return the declared results
    echo: () => ({ text: 5 }),
  };

  const decode: Pick<DecodeWorkerHandlers, 'accept'> = {
    async accept(args) {
      // The server receives handles for @remote tensors and pulls them when it wants ...
      const keys: Tensor = await args.blocks[0]!.keys.pull();
      // @ts-expect-error ... a handle has no host view
      args.blocks[0]!.values.toArray();
      // ... or passes them on to another service as they are.
      const next = await DecodeWorker.client(client).accept({ requestId: args.requestId, blocks: args.blocks, firstToken: args.firstToken });
      const handle: RemoteTensor = args.blocks[0]!.keys;
      // @ts-expect-error a received remote tensor is a handle, not a Tensor
      const owned: Tensor = args.blocks[0]!.keys;
      void [keys, handle, owned];
      return next;
    },
  };

  // @ts-expect-error every method of the service needs a handler
  ShardWorker.register(server, { info: () => ({ shard: { rank: 0, worldSize: 1, precision: Precision.F16, hiddenShard: 0 } }) } satisfies Partial<ShardWorkerHandlers>);

  const block: KvBlock = { layer: 0, index: 0, keys: tensor, values: tensor };
  void [badResult, decode, block, ctx];
}
