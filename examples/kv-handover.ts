// KV-cache hand-over between a prefill worker and a decode worker (disaggregated inference).
// The prefill worker produces the cache blocks of a prompt on its GPU (a kernel writes them) and
// calls the decode worker's `accept` with them as @remote tensors: only handles travel in the
// call; the decode worker pulls each block straight from the prefill worker's GPU into its own
// (the second GPU where there are two), checks every block with the checksum kernel there, then
// streams tokens generated from it. A second request is handed over by value instead
// (`acceptCopies`, asked for with the call's metadata `handover: copy`): the blocks travel with
// the call, all of them in one tag message (gathered and scattered by one kernel on each side).
// A third request lives in the prefill worker's paged KV pool, scattered over its blocks
// (`acceptPaged`, metadata `handover: paged`): only the pool's handle and the block ids travel,
// and the decode worker pulls the blocks into free blocks of its own pool by a block table, one
// RemoteTensor.pullBlocks. The two workers trust each other (one deployment, one token): the
// prefill worker grants direct pulls (ServerOptions.directPulls), so on a GPU the decode worker
// maps the pool's allocation and reads the blocks with one kernel of its own; elsewhere the owner
// gathers them with one kernel and the puller scatters them with one. Without a GPU both sides
// use host memory and the kernels' host twins.
//   node --import tsx examples/kv-handover.ts
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { callInfo, Client, Code, copyBlocks, GdrpcError, hostChecksum, loadKernels, RemoteTensor, Server, Tensor, type Device, type Kernels } from '../core/index.ts';
import { DecodeWorker, PrefillWorker, RequestState, type KvBlock, type KvBlockCopy } from '../schemas/gen/kv_transfer.ts';
import { Precision } from '../schemas/gen/tensor_parallel.ts';
import { announce, exampleDevice, role, startRole } from './peer.ts';

const LAYERS = 2;
const HEADS = 4;
const BLOCK = 16;
const HEAD_DIM = 128;
/** Blocks in each worker's paged KV pool; a pool block holds one layer's keys and values. */
const POOL_BLOCKS = 64;
const HALF_BYTES = HEADS * BLOCK * HEAD_DIM * 2;
const POOL_BLOCK_BYTES = 2 * HALF_BYTES;

/** The pool blocks `count` requests take, handed out from `free` (taken in a scrambled order, as
 *  a paged cache's free list ends up after a while). */
function takeBlocks(free: number[], count: number): number[] {
  if (free.length < count) throw new GdrpcError(Code.RESOURCE_EXHAUSTED, `the KV pool has ${free.length} free blocks, ${count} are needed`);
  return free.splice(0, count);
}

/** A free list of every block of a pool, scrambled. */
function freeList(): number[] {
  return Array.from({ length: POOL_BLOCKS }, (_, k) => (k * 37 + 11) % POOL_BLOCKS);
}

/** Where the prefill worker computes (rank 0) and where the decode worker receives (rank 1). */
const PREFILL_DEVICE: Device = exampleDevice(0);
const DECODE_DEVICE: Device = exampleDevice(1);

/** A deterministic stand-in for attention keys (kind 0) or values (kind 1): the fill kernel's
 *  pattern for a seed made of the block's place, written by `kernels` on its device. */
function cacheBlock(kernels: Kernels, requestId: string, layer: number, index: number, kind: number): Tensor {
  const t = Tensor.zeros([HEADS, BLOCK, HEAD_DIM], 'bf16', { device: kernels.device });
  kernels.fill(t, { seed: (requestId.length * 131 + layer * 31 + index * 7 + kind) >>> 0, scale: 2 });
  return t;
}

/** The deployment's shared token (set by main() for both workers): the prefill worker's server
 *  admits only peers that know it, since it grants them direct pulls of its paged pool. */
function deploymentToken(): string {
  const token = process.env.KV_HANDOVER_TOKEN;
  if (token === undefined || token === '') throw new Error('KV_HANDOVER_TOKEN is not set (main() sets it for the workers)');
  return token;
}

async function prefillWorker(): Promise<void> {
  // Direct pulls let the decode worker map the allocation of an exposed tensor (the paged pool,
  // an allocation of its own) and read and write all of it: granted to admitted peers only.
  const server = Server.create({ token: deploymentToken(), directPulls: true });
  const kernels = loadKernels(PREFILL_DEVICE);
  // The paged KV pool: [block, keys or values, heads, positions, headDim].
  const pool = Tensor.zeros([POOL_BLOCKS, 2, HEADS, BLOCK, HEAD_DIM], 'bf16', { device: PREFILL_DEVICE });
  const free = freeList();
  PrefillWorker.register(server, {
    async prefill({ requestId, tokens, decodeWorker }, ctx) {
      const blocksPerLayer = Math.ceil(tokens.numel / BLOCK);
      if (ctx.metadata.handover === 'paged') return prefillPaged(requestId, tokens, decodeWorker, blocksPerLayer);
      const blocks: KvBlock[] = [];
      for (let layer = 0; layer < LAYERS; layer += 1) {
        for (let index = 0; index < blocksPerLayer; index += 1) {
          // Queued on the kernels' stream: each block is sent once its own fill is done (stream-ordered).
          blocks.push({ layer, index, keys: cacheBlock(kernels, requestId, layer, index, 0), values: cacheBlock(kernels, requestId, layer, index, 1) });
        }
      }
      const firstToken = (tokens.toArray() as Int32Array).reduce((a, b) => a + b, 0) % 32000;
      // The blocks stay here; `accept` returns once the decode worker has pulled them all. By
      // value, `acceptCopies` returns once they arrived there.
      const client = await Client.connect(decodeWorker);
      try {
        const decode = DecodeWorker.client(client);
        const { state } = ctx.metadata.handover === 'copy'
          ? await decode.acceptCopies({ requestId, blocks: blocks as KvBlockCopy[], firstToken })
          : await decode.accept({ requestId, blocks, firstToken });
        return { firstToken, blocks: blocks.length, state };
      } finally {
        await client.close();
        for (const b of blocks) { (b.keys as Tensor).release(); (b.values as Tensor).release(); }
      }
    },
  });
  /** The request's blocks written into free blocks of the pool, handed over as the pool's handle
   *  and their ids; the blocks go back to the free list once the decode worker has them. */
  async function prefillPaged(requestId: string, tokens: Tensor, decodeWorker: string, blocksPerLayer: number) {
    const ids = takeBlocks(free, LAYERS * blocksPerLayer);
    const made: Tensor[] = [];
    try {
      const copies = [];
      for (let layer = 0; layer < LAYERS; layer += 1) {
        for (let index = 0; index < blocksPerLayer; index += 1) {
          const at = ids[layer * blocksPerLayer + index]! * POOL_BLOCK_BYTES;
          const keys = cacheBlock(kernels, requestId, layer, index, 0);
          const values = cacheBlock(kernels, requestId, layer, index, 1);
          made.push(keys, values);
          copies.push({ dst: pool, dstOffset: at, src: keys, srcOffset: 0 }, { dst: pool, dstOffset: at + HALF_BYTES, src: values, srcOffset: 0 });
        }
      }
      await copyBlocks(HALF_BYTES, copies);
      const firstToken = (tokens.toArray() as Int32Array).reduce((a, b) => a + b, 0) % 32000;
      const client = await Client.connect(decodeWorker);
      try {
        const { state } = await DecodeWorker.client(client).acceptPaged({ requestId, pool, blockIds: ids, firstToken });
        return { firstToken, blocks: ids.length, state };
      } finally {
        await client.close();
      }
    } finally {
      for (const t of made) t.release();
      free.push(...ids);
    }
  }

  announce((await server.listen({ host: '127.0.0.1' })).port);
}

async function decodeWorker(): Promise<void> {
  const caches = new Map<string, { blocks: Tensor[]; slots?: number[]; next: number }>();
  const server = Server.create();
  const kernels = loadKernels(DECODE_DEVICE);
  const host = loadKernels('cpu');
  // This worker's own paged KV pool, laid out like the prefill worker's.
  const pool = Tensor.zeros([POOL_BLOCKS, 2, HEADS, BLOCK, HEAD_DIM], 'bf16', { device: DECODE_DEVICE });
  const free = freeList().reverse();
  DecodeWorker.register(server, {
    async acceptPaged({ requestId, pool: remotePool, blockIds, firstToken }, { signal }) {
      // The request's blocks go to free blocks of this pool: one block table, one operation.
      const slots = takeBlocks(free, blockIds.length);
      try {
        const started = performance.now();
        // The pull ends with the call (its signal), not only at the pull's own deadline.
        await remotePool.pullBlocks(blockIds, { into: pool, at: slots, token: deploymentToken(), direct: true, signal });
        const pullMs = performance.now() - started;
        const how = callInfo(pool)?.transfers[0]?.protocol?.startsWith('gdrpc direct') === true ? 'direct' : 'two-sided';
        // Each landed block against the host twins' answer for the block the prefill worker was
        // asked to make (layer by layer, as blockIds lists them).
        const landed = pool.to('cpu').bytes();
        const perLayer = blockIds.length / 2;
        for (const [k, slot] of slots.entries()) {
          const layer = Math.floor(k / perLayer);
          const index = k % perLayer;
          for (const kind of [0, 1]) {
            const at = slot * POOL_BLOCK_BYTES + kind * HALF_BYTES;
            const expected = hostChecksum(cacheBlock(host, requestId, layer, index, kind).bytes());
            if (hostChecksum(landed.subarray(at, at + HALF_BYTES)) !== expected) throw new Error(`block ${layer}/${index}/${kind} differs from what the prefill worker computed`);
          }
        }
        caches.set(requestId, { blocks: [], slots, next: firstToken });
        console.log(`decode: pulled ${blockIds.length} pool blocks (${blockIds.length * POOL_BLOCK_BYTES} bytes) of ${requestId} from ${PREFILL_DEVICE} into blocks of this worker's pool on ${DECODE_DEVICE} in ${pullMs.toFixed(1)} ms (one pullBlocks, ${how}, block table ${blockIds.slice(0, 4).join(',')}... -> ${slots.slice(0, 4).join(',')}...); checksums verified`);
        return { state: RequestState.READY };
      } catch (error) {
        free.push(...slots);
        throw error;
      }
    },
    async accept({ requestId, blocks, firstToken }, { signal }) {
      // Pull every handle while the call lasts (the prefill worker lets go when it ends), as one
      // operation: one connection to the prefill worker, many pulls in flight on it.
      const started = performance.now();
      const pulled = await RemoteTensor.pullAll(blocks.flatMap((b) => [b.keys, b.values]), { device: DECODE_DEVICE, token: deploymentToken(), signal });
      const pullMs = performance.now() - started;
      // Each block's checksum, computed here by the checksum kernel, against the host twins'
      // answer for the block the prefill worker was asked to make.
      const kinds = blocks.flatMap((b) => [[b, 0], [b, 1]] as const);
      for (const [i, t] of pulled.entries()) {
        const [b, kind] = kinds[i]!;
        const expected = hostChecksum(cacheBlock(host, requestId, b.layer, b.index, kind).bytes());
        if (await kernels.checksum(t) !== expected) throw new Error(`block ${b.layer}/${b.index}/${kind} differs from what the prefill worker computed`);
      }
      caches.set(requestId, { blocks: pulled, next: firstToken });
      const bytes = pulled.reduce((n, t) => n + t.byteLength, 0);
      console.log(`decode: pulled ${pulled.length} blocks (${bytes} bytes) of ${requestId} from ${PREFILL_DEVICE} into ${DECODE_DEVICE} in ${pullMs.toFixed(1)} ms (one pullAll); checksums verified on ${DECODE_DEVICE}`);
      return { state: RequestState.READY };
    },
    async acceptCopies({ requestId, blocks, firstToken }, ctx) {
      // The blocks came with the call, into the server's pool on this worker's device; the pool
      // takes them back when the call ends, so the cache keeps copies.
      const received = blocks.flatMap((b) => [b.keys, b.values]);
      const kinds = blocks.flatMap((b) => [[b, 0], [b, 1]] as const);
      for (const [i, t] of received.entries()) {
        const [b, kind] = kinds[i]!;
        const expected = hostChecksum(cacheBlock(host, requestId, b.layer, b.index, kind).bytes());
        if (await kernels.checksum(t) !== expected) throw new Error(`block ${b.layer}/${b.index}/${kind} differs from what the prefill worker computed`);
      }
      const kept = received.map((t) => {
        const copy = Tensor.empty([...t.shape], t.dtype, { device: t.device });
        copy.copyFrom(t);
        return copy;
      });
      caches.set(requestId, { blocks: kept, next: firstToken });
      const bytes = received.reduce((n, t) => n + t.byteLength, 0);
      const shared = ctx.transfers.filter((t) => t.gathered !== undefined).length;
      console.log(`decode: received ${received.length} blocks (${bytes} bytes) of ${requestId} by value into ${DECODE_DEVICE}, ${shared} of them in shared tag messages; checksums verified on ${DECODE_DEVICE}`);
      return { state: RequestState.READY };
    },
    async *generate({ requestId, maxTokens }) {
      const cache = caches.get(requestId);
      if (cache === undefined) throw new GdrpcError(Code.NOT_FOUND, `unknown request ${requestId}`);
      for (let i = 0; i < maxTokens; i += 1) {
        cache.next = (cache.next * 1103515245 + 12345) % 32000;
        yield { token: cache.next, state: i + 1 === maxTokens ? RequestState.DONE : RequestState.DECODING };
      }
      for (const t of cache.blocks) t.release();
      free.push(...(cache.slots ?? []));
      caches.delete(requestId);
    },
  });
  announce((await server.listen({ host: '127.0.0.1' })).port);
}

async function main(): Promise<void> {
  const file = fileURLToPath(import.meta.url);
  // One token for the deployment, handed to the workers in their environment.
  process.env.KV_HANDOVER_TOKEN ||= randomBytes(16).toString('hex');
  const [prefillAt, decodeAt] = await Promise.all([startRole(file, 'prefill'), startRole(file, 'decode')]);
  const [prefillClient, decodeClient] = await Promise.all([Client.connect(prefillAt, { token: deploymentToken() }), Client.connect(decodeAt)]);
  const tokens = Tensor.fromArray(Int32Array.from({ length: 40 }, (_, i) => 100 + i));
  const started = performance.now();
  const result = await PrefillWorker.client(prefillClient).prefill({ requestId: 'req-1', tokens, precision: Precision.BF16, decodeWorker: decodeAt });
  console.log(`prefill: ${result.blocks} blocks handed over in ${(performance.now() - started).toFixed(1)} ms, state ${result.state}, first token ${result.firstToken}`);
  const generated: number[] = [];
  for await (const { token } of DecodeWorker.client(decodeClient).generate({ requestId: 'req-1', maxTokens: 8 })) generated.push(token);
  console.log(`generate: ${generated.join(' ')}`);
  // The same hand-over by value: the blocks travel with the decode worker's call.
  const copied = performance.now();
  const byValue = await PrefillWorker.client(prefillClient).prefill({ requestId: 'req-2', tokens, precision: Precision.BF16, decodeWorker: decodeAt }, { metadata: { handover: 'copy' } });
  console.log(`prefill: ${byValue.blocks} blocks handed over by value in ${(performance.now() - copied).toFixed(1)} ms, state ${byValue.state}`);
  for await (const { token } of DecodeWorker.client(decodeClient).generate({ requestId: 'req-2', maxTokens: 2 })) generated.push(token);
  // From the prefill worker's paged pool by a block table.
  const paged = performance.now();
  const byTable = await PrefillWorker.client(prefillClient).prefill({ requestId: 'req-3', tokens, precision: Precision.BF16, decodeWorker: decodeAt }, { metadata: { handover: 'paged' } });
  console.log(`prefill: ${byTable.blocks} blocks handed over from its paged pool in ${(performance.now() - paged).toFixed(1)} ms, state ${byTable.state}`);
  for await (const { token } of DecodeWorker.client(decodeClient).generate({ requestId: 'req-3', maxTokens: 2 })) generated.push(token);
  await Promise.all([prefillClient.close(), decodeClient.close()]);
}

const which = role();
if (which === 'prefill') await prefillWorker();
else if (which === 'decode') await decodeWorker();
else {
  await main();
  process.exit(0);
}
