// Block-table pulls (RemoteTensor.pullBlocks): blocks of one remote tensor by index, as one
// operation over one connection. The owner gathers the blocks of a part into one tensor
// (gdrpc.Owner/pullBlocks, docs/wire.md), parts go a few at a time, and each lands straight in its
// destination or is copied to its places (one kernel launch on a GPU). A KV pool exposed as one
// handle is what this is for: the decode side names the prefill side's blocks and its own.
import { Code, GdrpcError } from '../../errors.ts';
import { elementSize, Tensor, type Device, type TensorPool } from '../../tensor/index.ts';
import { Accept, rule, type OptionRules } from '../../tensor/options.ts';
import type { TensorWire } from '../../wire/frames.ts';
import type { DType, MethodDescriptor } from '../../schema/descriptor.ts';
import { attachCallInfo, callInfo, type CallInfo } from '../movers/call-info.ts';
import { lentTensor } from './lent.ts';
import { DEVICE, fixedTensorType, HANDLE_ARGS, landingDevice, OWNER_SERVICE, placementOf, POOL, PULL_LIMIT_OPTIONS, pullLimits, VIA, type OwnerClient, type OwnerConnection, type PullLimits } from './owner-client.ts';

/** Options of RemoteTensor.pullBlocks: where the blocks land (`into`, at rows `at`; else a new
 *  tensor from `pool` or on `device`), how long a block is, and how many parts go at once. */
export interface PullBlocksOptions {
  blockBytes?: number; into?: Tensor; at?: ArrayLike<number>; device?: Device; pool?: TensorPool; token?: string; maxInFlight?: number; partBytes?: number; via?: OwnerConnection;
  /** As PullOptions: for the whole pull, every part (default 60 s). */
  deadline?: number | Date; signal?: AbortSignal;
  /** Read the blocks straight from the owner's GPU memory with one kernel launch, where the owner
   *  grants it (ServerOptions.directPulls) and its allocation can be mapped here (the same node);
   *  otherwise the two-sided way (default false; direct.ts). */
  direct?: boolean;
}

/** Most bytes one gdrpc.Owner/pullBlocks call gathers: pullBlocks asks for more in parts. */
export const MAX_BLOCK_PULL_BYTES = 64 << 20;
/** Most blocks one gdrpc.Owner/pullBlocks call gathers (64 MiB of 4 KiB blocks): the owner's
 *  work per call, not only its staging, stays bounded. */
export const MAX_BLOCKS_PER_PULL = 16_384;
/** Most bytes of parts one pullBlocks keeps in flight (partBytes x maxInFlight): half of what an
 *  owner holds for one connection (OWNER_STAGING_BYTES_PER_CONNECTION). */
export const MAX_BLOCK_BYTES_IN_FLIGHT = 256 << 20;
/** The bytes of a pullBlocks part unless the call says (partBytes), and parts in flight unless
 *  it says (maxInFlight): two parts fill the 64 MiB staging pools on both sides
 *  (DEFAULT_PROCESS_POOL_BYTES), so a part needs no allocation and registration of its own (nor a
 *  new cuda_ipc mapping at the puller). A part costs about 1 ms whatever its size (one H200,
 *  4,096 blocks of 32 KiB: 8 MiB x 4 in flight 19-23 ms, 16 MiB x 4 13-16 ms, 32 MiB x 2 10-14 ms,
 *  64 MiB x 1 10-11 ms, 4 MiB x 8 30 ms; a connection included). */
export const DEFAULT_BLOCK_PART_BYTES = 32 << 20;
/** Parts of one pullBlocks in flight by default (DEFAULT_BLOCK_PART_BYTES). */
export const DEFAULT_BLOCK_PARTS_IN_FLIGHT = 2;
/** The arguments of gdrpc.Owner/pullBlocks: the handle, the block length and the block indices
 *  (little-endian u32, in the order they come back). */
export const PULL_BLOCKS_ARGS: MethodDescriptor['args'] = [
  ...HANDLE_ARGS, { name: 'b', type: { kind: 'scalar', name: 'u32' } }, { name: 'r', type: { kind: 'scalar', name: 'bytes' } },
];

/** The shape of one block of `blockBytes` of a tensor: a row of its first dimension keeps its
 *  shape ([4096, 16, 128] in blocks of one row: [16, 128]), any other length is flat. */
export function blockShapeOf(dtype: DType, shape: readonly number[], blockBytes: number): number[] {
  const itemBytes = elementSize(dtype);
  const rowItems = shape.slice(1).reduce((a, b) => a * b, 1);
  return shape.length > 1 && rowItems * itemBytes === blockBytes ? shape.slice(1) : [blockBytes / itemBytes];
}

const BLOCK_LIST = rule('an array or typed array of block indices', (value) => Array.isArray(value) || (ArrayBuffer.isView(value) && !(value instanceof DataView)));
export const PULL_BLOCKS_OPTIONS: OptionRules<PullBlocksOptions> = {
  blockBytes: Accept.integer(1, 0xffff_ffff, 'bytes'), into: rule('a Tensor', (value) => value instanceof Tensor), at: BLOCK_LIST,
  device: DEVICE, pool: POOL, token: Accept.nonEmptyString, maxInFlight: Accept.integer(1, 64, 'parts'),
  partBytes: Accept.integer(1, MAX_BLOCK_PULL_BYTES, 'bytes'), via: VIA, direct: Accept.boolean, ...PULL_LIMIT_OPTIONS,
};

/** Whether blocks of `blockBytes` tile a `byteLength`-byte tensor of `dtype`: whole elements,
 *  none left over (the rule puller and owner both apply). */
export function blocksTile(dtype: DType, byteLength: number, blockBytes: number): boolean {
  return blockBytes > 0 && blockBytes % elementSize(dtype) === 0 && byteLength % blockBytes === 0;
}

/** The handle a block-table pull reads: its descriptor and what the tensor is. */
interface BlockSource { readonly wire: TensorWire; readonly dtype: DType; readonly shape: readonly number[]; readonly byteLength: number }

/** A block-table pull, checked before anything connects. */
export interface BlockPull {
  source: BlockSource;
  indices: Uint32Array;
  /** Where block k lands in `into` (undefined: at k). */
  at: Uint32Array | undefined;
  into: Tensor | undefined;
  pool: TensorPool | undefined;
  device: Device;
  blockBytes: number;
  blockShape: number[];
  /** Blocks a part asks for, parts in all, and parts in flight. */
  perPart: number;
  parts: number;
  inFlight: number;
  /** One part that fills its destination whole is received straight into it. */
  straight: boolean;
  /** Try a direct pull first (PullBlocksOptions.direct). */
  direct: boolean;
  /** The pull's signal and deadline, for every call it makes to the owner. */
  limits: PullLimits;
}

/** Checks a pull of `blocks` of `source` (options already checked against PULL_BLOCKS_OPTIONS);
 *  INVALID_ARGUMENT for anything that does not fit. */
export function planBlockPull(source: BlockSource, blocks: ArrayLike<number>, options: PullBlocksOptions): BlockPull {
  const blockBytes = options.blockBytes ?? source.shape.slice(1).reduce((a, b) => a * b, 1) * elementSize(source.dtype);
  if (!blocksTile(source.dtype, source.byteLength, blockBytes)) {
    throw invalid(`blocks of ${blockBytes} bytes do not tile the ${source.byteLength}-byte ${source.dtype} tensor`);
  }
  const partBytes = options.partBytes ?? Math.max(DEFAULT_BLOCK_PART_BYTES, Math.min(blockBytes, MAX_BLOCK_PULL_BYTES));
  if (blockBytes > partBytes) throw invalid(`blocks of ${blockBytes} bytes do not fit parts of ${partBytes} (at most ${MAX_BLOCK_PULL_BYTES}): pull() the tensor`);
  const inFlight = options.maxInFlight ?? DEFAULT_BLOCK_PARTS_IN_FLIGHT;
  if (partBytes * inFlight > MAX_BLOCK_BYTES_IN_FLIGHT) {
    throw invalid(`${inFlight} parts of ${partBytes} bytes in flight are over the ${MAX_BLOCK_BYTES_IN_FLIGHT} bytes an owner stages for one pull`);
  }
  const indices = blockIndices('blocks', blocks, source.byteLength / blockBytes);
  const { into } = options;
  if (into !== undefined && (into.released || into.dtype !== source.dtype || into.byteLength % blockBytes !== 0)) {
    throw invalid(`into must be a live ${source.dtype} tensor of whole ${blockBytes}-byte blocks, got a${into.released ? ' released' : ''} ${into.dtype} tensor of ${into.byteLength} bytes`);
  }
  const at = options.at === undefined ? undefined : placesIn(into, options.at, indices.length, blockBytes);
  if (at === undefined && into !== undefined && into.byteLength < indices.length * blockBytes) {
    throw invalid(`into holds ${into.byteLength / blockBytes} blocks, ${indices.length} were asked for`);
  }
  const perPart = Math.min(MAX_BLOCKS_PER_PULL, Math.floor(partBytes / blockBytes));
  const parts = Math.ceil(indices.length / perPart);
  return {
    source, indices, at, into, pool: options.pool, blockBytes, perPart, parts, inFlight,
    device: landingDevice({ ...(into !== undefined ? { into } : {}), ...(options.pool !== undefined ? { pool: options.pool } : {}), ...(options.device !== undefined ? { device: options.device } : {}) }),
    blockShape: blockShapeOf(source.dtype, source.shape, blockBytes),
    straight: parts === 1 && at === undefined && (into === undefined || into.byteLength === indices.length * blockBytes),
    direct: options.direct === true,
    limits: pullLimits(options),
  };
}

/** Runs `plan` over `client`: its parts, `inFlight` at a time (and, over a shared connection,
 *  as its room allows); resolves to the tensor the blocks are in. A failure lets the parts in
 *  flight end, releases what it made, and throws the first. */
export async function runBlockPull(client: OwnerClient, plan: BlockPull, via?: OwnerConnection): Promise<Tensor> {
  const { into, indices, blockShape, source, device, pool } = plan;
  const made = into === undefined && !plan.straight;
  let target = made ? (pool !== undefined ? pool.allocate([indices.length, ...blockShape], source.dtype) : Tensor.empty([indices.length, ...blockShape], source.dtype, { device })) : into;
  const infos: CallInfo[] = [];
  try {
    let next = 0;
    const failures: unknown[] = [];
    const lane = async (): Promise<void> => {
      while (next < plan.parts) {
        const part = next++;
        const bytes = Math.min(plan.perPart, indices.length - part * plan.perPart) * plan.blockBytes;
        const giveBack = via === undefined ? undefined : await via.room(bytes);
        try {
          const got = await pullPart(client, plan, part, target);
          infos.push(got.info);
          target = got.target;
        } finally {
          giveBack?.();
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(plan.parts, plan.inFlight) }, () => lane().catch((error: unknown) => {
      failures.push(error);
      next = plan.parts;  // no further part starts
    })));
    if (failures.length > 0) throw failures[0];
  } catch (error) {
    if (made || (plan.straight && into === undefined)) target?.release();
    throw error;
  }
  let durationMs = 0;
  for (const info of infos) durationMs = Math.max(durationMs, info.durationMs);
  return attachCallInfo(target!, { transfers: infos.flatMap((info) => info.transfers), durationMs });
}

/** One part: asks the owner for its blocks, then either has them straight in the destination or
 *  copies them from staging to their places (the part is complete once UCX finished receiving it). */
async function pullPart(client: OwnerClient, plan: BlockPull, part: number, target: Tensor | undefined): Promise<{ info: CallInfo; target: Tensor | undefined }> {
  const { blockBytes, source, at } = plan;
  const start = part * plan.perPart;
  const end = Math.min(plan.indices.length, start + plan.perPart);
  const method: MethodDescriptor = {
    name: 'pullBlocks', service: OWNER_SERVICE, clientStreaming: false, serverStreaming: false, args: PULL_BLOCKS_ARGS,
    results: [{ name: 't', type: fixedTensorType(source.dtype, [end - start, ...plan.blockShape], placementOf(plan.device)) }],
  };
  const result = await client.unary(method, { x: source.wire.x!, s: source.wire.s!, b: blockBytes, r: littleEndian(plan.indices.subarray(start, end)) }, allocatorOf(client, plan, target), plan.limits);
  const got = result.t as Tensor;
  const info = callInfo(result) ?? { transfers: [], durationMs: 0 };
  if (plan.straight) return { info, target: got };
  try {
    if (at === undefined) await client.copyBlocks((end - start) * blockBytes, [{ dst: target!, dstOffset: start * blockBytes, src: got, srcOffset: 0 }], { sourcesReady: true });
    else await client.copyBlocks(blockBytes, { dst: target!, dstBlocks: at.subarray(start, end), src: got, count: end - start }, { sourcesReady: true });
  } finally {
    got.release();
  }
  return { info, target };
}

/** Where a part is received: straight into the destination (the caller's `into` stays the
 *  caller's whatever happens), else into the pool given when it has room, else into the runtime's
 *  pool on the device (mapped memory: no registration per part). */
function allocatorOf(client: OwnerClient, plan: BlockPull, target: Tensor | undefined): ((shape: number[], dtype: DType) => Tensor) | undefined {
  const { pool } = plan;
  if (plan.straight) return target !== undefined ? () => lentTensor(target) : pool !== undefined ? (shape, dtype) => pool.allocate(shape, dtype) : undefined;
  return (shape, dtype) => {
    if (pool !== undefined) {
      try {
        return pool.allocate(shape, dtype);
      } catch (error) {
        if (!(error instanceof GdrpcError) || error.code !== Code.RESOURCE_EXHAUSTED) throw error;
      }
    }
    return client.staging(plan.device).allocate(shape, dtype);
  };
}

/** `at` checked against `into`: one place per block, each a block of `into`, none twice. */
function placesIn(into: Tensor | undefined, list: ArrayLike<number>, count: number, blockBytes: number): Uint32Array {
  if (into === undefined) throw invalid('at places blocks in into, and there is none');
  const at = blockIndices('at', list, into.byteLength / blockBytes);
  if (at.length !== count) throw invalid(`${at.length} places in at for ${count} blocks`);
  const taken = new Uint8Array(into.byteLength / blockBytes);
  for (const [k, place] of at.entries()) {
    if (taken[place] === 1) throw invalid(`at[${k}] = ${place} names a block of into a second time`);
    taken[place] = 1;
  }
  return at;
}

function invalid(message: string): GdrpcError {
  return new GdrpcError(Code.INVALID_ARGUMENT, `RemoteTensor.pullBlocks: ${message}`);
}

/** `list` as u32 block indices, each below `count`; INVALID_ARGUMENT naming `what` otherwise. */
function blockIndices(what: string, list: ArrayLike<number>, count: number): Uint32Array {
  if (typeof list !== 'object' || list === null || !Number.isSafeInteger(list.length) || list.length === 0) throw invalid(`${what} must list one or more blocks`);
  const indices = new Uint32Array(list.length);
  for (let k = 0; k < list.length; k += 1) {
    const index = list[k];
    if (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index >= count) {
      throw invalid(`${what}[${k}] = ${String(index)} is not a block index below ${count}`);
    }
    indices[k] = index;
  }
  return indices;
}

/** Block indices as gdrpc.Owner/pullBlocks reads them: little-endian u32. */
function littleEndian(indices: Uint32Array): Uint8Array {
  const out = new Uint8Array(indices.length * 4);
  const view = new DataView(out.buffer);
  for (const [k, index] of indices.entries()) view.setUint32(k * 4, index, true);
  return out;
}
