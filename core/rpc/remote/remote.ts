// Remote tensors (`@remote` placement): the bytes stay with their owner, the receiver gets a
// handle that it (or anyone it passes the handle to) pulls from the owner through the reserved
// method gdrpc.Owner/pull (docs/wire.md "Remote handle"). The owner's table is its runtime's
// (remote-owner.ts); a handle pulls through a Client on the runtime it arrived on, which the side
// that decoded it hands over as an OwnerDialer.
import { Code, GdrpcError } from '../../errors.ts';
import { elementSize, Tensor, TensorPool, type Device } from '../../tensor/index.ts';
import { isDevice } from '../../tensor/device.ts';
import { Accept, checkOptions, rule, type OptionRules } from '../../tensor/options.ts';
import type { TensorWire } from '../../wire/frames.ts';
import type { DType, MethodDescriptor, Placement, TypeRef } from '../../schema/descriptor.ts';
import type { TransferScope } from '../movers/mover.ts';
import { attachCallInfo, callInfo, confirmTransfers, type CallInfo } from '../movers/call-info.ts';
import { Runtime } from '../runtime/runtime.ts';
import type { BlockCopy } from '../../compute/blocks.ts';
import { lentTensor } from '../transfer/transfer.ts';

/** Service name of the owner side of remote tensors. */
export const OWNER_SERVICE = 'gdrpc.Owner';

/** One pull from an owner: a Client made for it. */
export interface OwnerClient {
  /** `allocate` gets each result tensor's field ("... results.ts[3]") besides its shape and dtype. */
  unary(method: MethodDescriptor, args: Record<string, unknown>, allocate: ((shape: number[], dtype: DType, placement: Placement, field: string) => Tensor) | undefined): Promise<Record<string, unknown>>;
  /** Copies a stacked answer out (the runtime's BlockCopier). */
  copyBlocks(blockBytes: number, copies: readonly BlockCopy[], options?: { sourcesReady?: boolean }): Promise<void>;
  /** Where pullBlocks receives its parts on `device` (the runtime's pool there, mapped once). */
  staging(device: Device): TensorPool;
  close(): Promise<void>;
}

/** Connects a Client to the owner at `owner` ("host:port"), on the runtime the handle came to. */
export type OwnerDialer = (owner: string, token: string | undefined) => Promise<OwnerClient>;

/** Registers `tensor` as remote for the call of `scope`, on its connection's runtime; returns its
 *  handle descriptor. Released when the call ends or the connection dies (exposures), or after one pull. */
export function exposeRemote(tensor: Tensor, scope: TransferScope): TensorWire {
  const { connection, call } = scope;
  return connection.runtime.owner.expose(tensor, connection.peer, (forget) => {
    const exposure = connection.exposures.add(call, forget);
    return () => connection.exposures.release(exposure);
  });
}

/** Number of remote tensors currently exposed on `runtime` (default: the default runtime), for leak checks. */
export function remoteExposures(runtime: Runtime | undefined = Runtime.current()): number {
  return runtime?.owner.size ?? 0;
}

/** Options of RemoteTensor.pull; `via` pulls over a connection made with connect() (kept open). */
export interface PullOptions { device?: Device; into?: Tensor; pool?: TensorPool; token?: string; via?: OwnerConnection }

/** A connection to the owner of remote tensors, made once (RemoteTensor.connect) and used by
 *  pulls and block-table pulls given it as `via`: a worker that pulls from the same peer again
 *  and again (a decode worker from its prefill worker) saves a connection and handshake per
 *  pull. Pulls never close it; close() does (calls on it still running fail). */
export class OwnerConnection {
  readonly #client: OwnerClient;
  readonly #dial: OwnerDialer;
  #closed = false;

  /** Internal: made by RemoteTensor.connect. */
  constructor(readonly owner: string, dial: OwnerDialer, client: OwnerClient) {
    this.#dial = dial;
    this.#client = client;
  }

  get closed(): boolean { return this.#closed; }

  /** Closes the connection; idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#client.close();
  }

  /** The client for a pull of `handle` (pulled through `dial`): FAILED_PRECONDITION when closed,
   *  INVALID_ARGUMENT when the handle has another owner or came to another runtime. */
  clientFor(handle: RemoteTensor, dial: OwnerDialer): OwnerClient {
    if (this.#closed) throw new GdrpcError(Code.FAILED_PRECONDITION, `the connection to ${this.owner} is closed`);
    if (handle.owner !== this.owner || dial !== this.#dial) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `a handle owned by ${handle.owner} cannot be pulled via the connection to ${this.owner}${handle.owner === this.owner ? ' made on another runtime' : ''}`);
    }
    return this.#client;
  }
}

/** Options of RemoteTensor.pullAll: pull's, with `into` one tensor per handle, and how many pulls
 *  one connection keeps in flight. */
export interface PullAllOptions { device?: Device; into?: readonly Tensor[]; pool?: TensorPool; token?: string; maxInFlight?: number }

/** Options of RemoteTensor.pullBlocks: where the blocks land (`into`, at rows `at`; else a new
 *  tensor from `pool` or on `device`), how long a block is, and how many parts go at once. */
export interface PullBlocksOptions { blockBytes?: number; into?: Tensor; at?: ArrayLike<number>; device?: Device; pool?: TensorPool; token?: string; maxInFlight?: number; partBytes?: number; via?: OwnerConnection }

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
  { name: 'x', type: { kind: 'scalar', name: 'u32' } }, { name: 's', type: { kind: 'scalar', name: 'bytes' } },
  { name: 'b', type: { kind: 'scalar', name: 'u32' } }, { name: 'r', type: { kind: 'scalar', name: 'bytes' } },
];

/** The shape of one block of `blockBytes` of a tensor: a row of its first dimension keeps its
 *  shape ([4096, 16, 128] in blocks of one row: [16, 128]), any other length is flat. */
export function blockShapeOf(dtype: DType, shape: readonly number[], blockBytes: number): number[] {
  const itemBytes = elementSize(dtype);
  const rowItems = shape.slice(1).reduce((a, b) => a * b, 1);
  return shape.length > 1 && rowItems * itemBytes === blockBytes ? shape.slice(1) : [blockBytes / itemBytes];
}

/** Tensors one connection of pullAll keeps in flight by default. */
export const DEFAULT_PULLS_IN_FLIGHT = 512;
/** Most handles one gdrpc.Owner/pullMany call takes (the owner refuses more). */
export const MAX_PULLS_PER_CALL = 1024;
/** The arguments of gdrpc.Owner/pullMany: the handles' ids and capabilities, in order. */
export const PULL_MANY_ARGS: MethodDescriptor['args'] = [{ name: 'xs', type: { kind: 'list', element: { kind: 'scalar', name: 'u32' } } }, { name: 'ss', type: { kind: 'list', element: { kind: 'scalar', name: 'bytes' } } }];
/** Handles pullAll asks for in one pullMany or pullStacked call. */
const PULL_BATCH = 128;
/** Largest handle pullAll has gathered with others (gdrpc.Owner/pullStacked): stacking saves a
 *  message and its JavaScript per block, which counts for small blocks; larger ones move as
 *  themselves (pullMany) rather than through two extra copies and a staging tensor. */
export const MAX_STACKED_BLOCK_BYTES = 1 << 20;

const DEVICE = rule(`'cpu' or 'cuda:N'`, isDevice);
const POOL = rule('a TensorPool', (value) => value instanceof TensorPool);
const VIA = rule('an OwnerConnection (RemoteTensor.connect)', (value) => value instanceof OwnerConnection);
const PULL_OPTIONS: OptionRules<PullOptions> = {
  device: DEVICE, into: rule('a Tensor', (value) => value instanceof Tensor), pool: POOL, token: Accept.nonEmptyString, via: VIA,
};
const BLOCK_LIST = rule('an array or typed array of block indices', (value) => Array.isArray(value) || (ArrayBuffer.isView(value) && !(value instanceof DataView)));
const PULL_BLOCKS_OPTIONS: OptionRules<PullBlocksOptions> = {
  blockBytes: Accept.integer(1, 0xffff_ffff, 'bytes'), into: rule('a Tensor', (value) => value instanceof Tensor), at: BLOCK_LIST,
  device: DEVICE, pool: POOL, token: Accept.nonEmptyString, maxInFlight: Accept.integer(1, 64, 'parts'),
  partBytes: Accept.integer(1, MAX_BLOCK_PULL_BYTES, 'bytes'), via: VIA,
};
const PULL_ALL_OPTIONS: OptionRules<PullAllOptions> = {
  device: DEVICE, pool: POOL, token: Accept.nonEmptyString, maxInFlight: Accept.integer(1, 65_536, 'tensors'),
  into: rule('an array of Tensors', (value) => Array.isArray(value) && value.every((t) => t instanceof Tensor)),
};

/** Where one pull lands: a given tensor, a pool, or a device (a new tensor, or the results pool). */
interface Landing { into?: Tensor; pool?: TensorPool; device?: Device }

/** A handle to a tensor that stays with its owner until pulled (`@remote` placement). */
export class RemoteTensor {
  readonly #dial: OwnerDialer | undefined;
  /** `dial` is how pulls connect (given by the side that decoded the handle); without it pull() fails. */
  constructor(readonly wire: TensorWire, dial?: OwnerDialer) {
    this.#dial = dial;
  }

  /** The same handle with another descriptor, pulled the same way (tests forge handles so). */
  withWire(wire: TensorWire): RemoteTensor { return new RemoteTensor(wire, this.#dial); }

  get dtype(): DType { return this.wire.dt as DType; }
  get shape(): readonly number[] { return this.wire.sh; }
  get byteLength(): number { return this.wire.n; }
  /** "host:port" of the owner. */
  get owner(): string { return this.wire.o!; }

  /** Fetches the bytes from the owner into `into`, a tensor from `pool`, or a new one on `device`. */
  async pull(options: PullOptions = {}): Promise<Tensor> {
    checkOptions('RemoteTensor.pull options', options, PULL_OPTIONS);
    const dial = this.#dialer();
    this.#checkInto(options.into);
    const { via } = options;
    const client = via !== undefined ? via.clientFor(this, dial) : await dial(this.owner, options.token);
    let tensor: Tensor;
    try {
      tensor = await this.#pullThrough(client, options);
    } catch (error) {
      if (via === undefined) await client.close();
      throw error;
    }
    if (via === undefined) closeWhenReported(client, [tensor]);
    return tensor;
  }

  /** A connection to this handle's owner for pulls to share (`via`): one handshake for many
   *  pulls from the same owner. `token` is the owner's admission token. */
  async connect(options: { token?: string } = {}): Promise<OwnerConnection> {
    checkOptions('RemoteTensor.connect options', options, { token: Accept.nonEmptyString });
    const dial = this.#dialer();
    return new OwnerConnection(this.owner, dial, await dial(this.owner, options.token));
  }

  /** Fetches blocks of this handle's tensor by index, as one operation over one connection (a
   *  block table over a KV pool exposed as one handle): block i is the bytes
   *  [i * blockBytes, (i + 1) * blockBytes) of the tensor (blockBytes defaults to one row of its
   *  first dimension). The owner gathers the blocks asked for into one tensor that moves as one
   *  message (gdrpc.Owner/pullBlocks; parts of up to 32 MiB unless partBytes says, up to 64 MiB;
   *  2 parts in flight unless maxInFlight says). They land in
   *  order in a new [n, ...block] tensor (from `pool`, or on `device`), or in `into`: block k at
   *  block `at[k]` of it (default k), copied out by one kernel launch on a GPU. The handle stays
   *  pullable. Resolves to the tensor the blocks are in; a failure releases what it made and
   *  leaves `into` partly written. */
  async pullBlocks(blocks: ArrayLike<number>, options: PullBlocksOptions = {}): Promise<Tensor> {
    checkOptions('RemoteTensor.pullBlocks options', options, PULL_BLOCKS_OPTIONS);
    const rowItems = this.shape.slice(1).reduce((a, b) => a * b, 1);
    const blockBytes = options.blockBytes ?? rowItems * elementSize(this.dtype);
    if (blockBytes === 0 || blockBytes % elementSize(this.dtype) !== 0 || this.byteLength % blockBytes !== 0) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `RemoteTensor.pullBlocks: blocks of ${blockBytes} bytes do not tile the ${this.byteLength}-byte ${this.dtype} tensor`);
    }
    const partBytes = options.partBytes ?? Math.max(DEFAULT_BLOCK_PART_BYTES, Math.min(blockBytes, MAX_BLOCK_PULL_BYTES));
    if (blockBytes > partBytes) throw new GdrpcError(Code.INVALID_ARGUMENT, `RemoteTensor.pullBlocks: blocks of ${blockBytes} bytes do not fit parts of ${partBytes} (at most ${MAX_BLOCK_PULL_BYTES}): pull() the tensor`);
    const inFlight = options.maxInFlight ?? DEFAULT_BLOCK_PARTS_IN_FLIGHT;
    if (partBytes * inFlight > MAX_BLOCK_BYTES_IN_FLIGHT) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `RemoteTensor.pullBlocks: ${inFlight} parts of ${partBytes} bytes in flight are over the ${MAX_BLOCK_BYTES_IN_FLIGHT} bytes an owner stages for one pull`);
    }
    const indices = blockIndices('blocks', blocks, this.byteLength / blockBytes);
    const { into } = options;
    if (into !== undefined && (into.released || into.dtype !== this.dtype || into.byteLength % blockBytes !== 0)) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `RemoteTensor.pullBlocks: into must be a live ${this.dtype} tensor of whole ${blockBytes}-byte blocks, got a${into.released ? ' released' : ''} ${into.dtype} tensor of ${into.byteLength} bytes`);
    }
    let at: Uint32Array | undefined;
    if (options.at !== undefined) {
      if (into === undefined) throw new GdrpcError(Code.INVALID_ARGUMENT, 'RemoteTensor.pullBlocks: at places blocks in into, and there is none');
      at = blockIndices('at', options.at, into.byteLength / blockBytes);
      if (at.length !== indices.length) throw new GdrpcError(Code.INVALID_ARGUMENT, `RemoteTensor.pullBlocks: ${at.length} places in at for ${indices.length} blocks`);
      const taken = new Uint8Array(into.byteLength / blockBytes);
      for (const [k, place] of at.entries()) {
        if (taken[place] === 1) throw new GdrpcError(Code.INVALID_ARGUMENT, `RemoteTensor.pullBlocks: at[${k}] = ${place} names a block of into a second time`);
        taken[place] = 1;
      }
    } else if (into !== undefined && into.byteLength < indices.length * blockBytes) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `RemoteTensor.pullBlocks: into holds ${into.byteLength / blockBytes} blocks, ${indices.length} were asked for`);
    }
    const device = landingDevice({ ...(into !== undefined ? { into } : {}), ...(options.pool !== undefined ? { pool: options.pool } : {}), ...(options.device !== undefined ? { device: options.device } : {}) });
    const blockShape = blockShapeOf(this.dtype, this.shape, blockBytes);
    const perPart = Math.min(MAX_BLOCKS_PER_PULL, Math.floor(partBytes / blockBytes));
    const parts = Math.ceil(indices.length / perPart);
    // One part that fills its destination whole lands there straight; otherwise each part is
    // received into staging (the client's results pool) and copied to its places.
    const straight = parts === 1 && at === undefined && (into === undefined || into.byteLength === indices.length * blockBytes);
    const { via } = options;
    const dial = this.#dialer();
    const client = via !== undefined ? via.clientFor(this, dial) : await dial(this.owner, options.token);
    // A part is received into the pool given when it has room, else into the runtime's pool on
    // the device (mapped memory: no registration per part).
    const staging = (shape: number[], dtype: DType): Tensor => {
      if (options.pool !== undefined) {
        try {
          return options.pool.allocate(shape, dtype);
        } catch (error) {
          if (!(error instanceof GdrpcError) || error.code !== Code.RESOURCE_EXHAUSTED) throw error;
        }
      }
      return client.staging(device).allocate(shape, dtype);
    };
    let target = into;
    const made = into === undefined && !straight;
    const infos: CallInfo[] = [];
    try {
      if (made) target = options.pool !== undefined ? options.pool.allocate([indices.length, ...blockShape], this.dtype) : Tensor.empty([indices.length, ...blockShape], this.dtype, { device });
      let next = 0;
      const lane = async (): Promise<void> => {
        while (next < parts) {
          const part = next++;
          const start = part * perPart;
          const end = Math.min(indices.length, start + perPart);
          const method: MethodDescriptor = {
            name: 'pullBlocks', service: OWNER_SERVICE, clientStreaming: false, serverStreaming: false, args: PULL_BLOCKS_ARGS,
            results: [{ name: 't', type: fixedTensorType(this.dtype, [end - start, ...blockShape], placementOf(device)) }],
          };
          const allocate = straight ? (target !== undefined ? () => lentTensor(target!) : options.pool !== undefined ? (shape: number[], dtype: DType) => options.pool!.allocate(shape, dtype) : undefined) : staging;
          const result = await client.unary(method, { x: this.wire.x!, s: this.wire.s!, b: blockBytes, r: littleEndian(indices.subarray(start, end)) }, allocate);
          const got = result.t as Tensor;
          const info = callInfo(result);
          if (info !== undefined) infos.push(info);
          if (straight) {
            target = got;
            continue;
          }
          try {
            // The part is complete: UCX finished receiving it.
            if (at === undefined) await client.copyBlocks((end - start) * blockBytes, [{ dst: target!, dstOffset: start * blockBytes, src: got, srcOffset: 0 }], { sourcesReady: true });
            else await client.copyBlocks(blockBytes, Array.from(at.subarray(start, end), (place, k) => ({ dst: target!, dstOffset: place * blockBytes, src: got, srcOffset: k * blockBytes })), { sourcesReady: true });
          } finally {
            got.release();
          }
        }
      };
      const failures: unknown[] = [];
      await Promise.all(Array.from({ length: Math.min(parts, inFlight) }, () => lane().catch((error: unknown) => {
        failures.push(error);
        next = parts;  // no further part starts
      })));
      if (failures.length > 0) throw failures[0];
    } catch (error) {
      if (made || (straight && into === undefined)) target?.release();
      if (via === undefined) await client.close();
      throw error;
    }
    let durationMs = 0;
    for (const info of infos) durationMs = Math.max(durationMs, info.durationMs);
    const result = infos.length === 0 ? target! : attachCallInfo(target!, { transfers: infos.flatMap((info) => info.transfers), durationMs });
    if (via === undefined) closeWhenReported(client, [result]);
    return result;
  }

  /** Fetches many handles as one operation: one connection per owner (not one per handle), the
   *  handles asked for in batches of up to 128 of one dtype and shape, up to `maxInFlight`
   *  tensors in flight on each connection, one promise for all. A batch of handles of 1 MiB or
   *  less (MAX_STACKED_BLOCK_BYTES) is gathered by the owner into one tensor that moves as one
   *  message and is copied out here (gdrpc.Owner/pullStacked); larger ones move side by side, one
   *  message each (gdrpc.Owner/pullMany). The tensors come back in the order of `handles`. If any
   *  pull fails, the others are let finish, every tensor this call made is released, and the
   *  first failure is thrown; tensors given in `into` stay the caller's. An owner without those
   *  methods is asked with the next one down, down to one pull per handle on the same connection. */
  static async pullAll(handles: readonly RemoteTensor[], options: PullAllOptions = {}): Promise<Tensor[]> {
    if (!Array.isArray(handles) || !handles.every((h) => h instanceof RemoteTensor)) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, 'RemoteTensor.pullAll takes an array of RemoteTensors');
    }
    checkOptions('RemoteTensor.pullAll options', options, PULL_ALL_OPTIONS);
    const into = options.into;
    if (into !== undefined && into.length !== handles.length) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `RemoteTensor.pullAll: ${into.length} tensors in into for ${handles.length} handles`);
    }
    const landing = (i: number): Landing => (into !== undefined ? { into: into[i]! } : options.pool !== undefined ? { pool: options.pool } : { device: options.device ?? 'cpu' });
    // One connection per owner and dialer (the runtime a handle arrived on); on it, batches of
    // handles that share a dtype, a shape and where they land.
    const groups = new Map<OwnerDialer, Map<string, number[][]>>();
    const open = new Map<OwnerDialer, Map<string, number[]>>();  // the batch still filling, per owner and batch key
    for (const [i, handle] of handles.entries()) {
      handle.#checkInto(into?.[i]);
      const dial = handle.#dialer();
      const byOwner = groups.get(dial) ?? new Map<string, number[][]>();
      groups.set(dial, byOwner);
      const batches = byOwner.get(handle.owner) ?? [];
      byOwner.set(handle.owner, batches);
      const filling = open.get(dial) ?? new Map<string, number[]>();
      open.set(dial, filling);
      const key = `${handle.owner}|${handle.dtype}|${handle.shape.join(',')}|${landingDevice(landing(i))}`;
      const batch = filling.get(key);
      if (batch !== undefined && batch.length < PULL_BATCH) {
        batch.push(i);
      } else {
        const fresh = [i];
        batches.push(fresh);
        filling.set(key, fresh);
      }
    }
    const results: Array<Tensor | undefined> = new Array(handles.length);
    const failures: unknown[] = [];
    const lanes = Math.max(1, Math.ceil((options.maxInFlight ?? DEFAULT_PULLS_IN_FLIGHT) / PULL_BATCH));
    const pullGroup = async (dial: OwnerDialer, owner: string, batches: number[][]): Promise<void> => {
      const client = await dial(owner, options.token);
      let pulled = false;
      try {
        let next = 0;
        // What the owner answers, until it says it has no such method.
        let stackAnswered = true;
        let manyAnswered = true;
        const lane = async (): Promise<void> => {
          while (next < batches.length && failures.length === 0) {
            const batch = batches[next++]!;
            const batchHandles = batch.map((i) => handles[i]!);
            const batchInto = into === undefined ? undefined : batch.map((i) => into[i]!);
            let tensors: Tensor[] | undefined;
            if (stackAnswered && batch.length > 1 && batchHandles[0]!.byteLength <= MAX_STACKED_BLOCK_BYTES) {
              try {
                tensors = await RemoteTensor.#pullStacked(client, batchHandles, landing(batch[0]!), batchInto);
              } catch (error) {
                if (!isUnknownMethod(error)) throw error;
                stackAnswered = false;
              }
            }
            if (tensors === undefined && manyAnswered) {
              try {
                tensors = await RemoteTensor.#pullBatch(client, batchHandles, landing(batch[0]!), batchInto);
              } catch (error) {
                if (!isUnknownMethod(error)) throw error;
                manyAnswered = false;
              }
            }
            if (tensors !== undefined) for (const [k, i] of batch.entries()) results[i] = tensors[k];
            else for (const i of batch) results[i] = await handles[i]!.#pullThrough(client, landing(i));
          }
        };
        await Promise.all(Array.from({ length: Math.min(lanes, batches.length) }, () => lane().catch((error: unknown) => { failures.push(error); })));
        pulled = failures.length === 0;
      } finally {
        if (pulled) closeWhenReported(client, batches.flat().map((i) => results[i]));
        else await client.close();
      }
    };
    const runs = [...groups].flatMap(([dial, byOwner]) => [...byOwner].map(([owner, batches]) => pullGroup(dial, owner, batches)));
    for (const outcome of await Promise.allSettled(runs)) if (outcome.status === 'rejected') failures.push(outcome.reason);
    if (failures.length > 0) {
      if (into === undefined) for (const tensor of results) tensor?.release();
      throw failures[0];
    }
    return results as Tensor[];
  }

  /** One gdrpc.Owner/pullStacked call for handles of one dtype and shape that land alike: the
   *  owner gathers them into one [n, ...shape] tensor, which moves as one message and is then
   *  copied out into one tensor per handle (copyBlocks: one kernel launch on a GPU). Each tensor
   *  carries the call's report, whose one transfer is the stacked tensor `t`. */
  static async #pullStacked(client: OwnerClient, batch: RemoteTensor[], landing: Landing, into: Tensor[] | undefined): Promise<Tensor[]> {
    const first = batch[0]!;
    const device = landingDevice(landing);
    const method: MethodDescriptor = {
      name: 'pullStacked', service: OWNER_SERVICE, clientStreaming: false, serverStreaming: false,
      args: PULL_MANY_ARGS,
      results: [{ name: 't', type: fixedTensorType(first.dtype, [batch.length, ...first.shape], placementOf(device)) }],
    };
    const result = await client.unary(method, { xs: batch.map((h) => h.wire.x!), ss: batch.map((h) => h.wire.s!) }, undefined);
    const stacked = result.t as Tensor;
    const made: Tensor[] = [];
    try {
      // Each handle's tensor comes from where a pull of it would land: `into`, the pool given, or
      // the pool the stacked tensor came to (the client's results pool) when it is on that device.
      const from = landing.pool ?? (stacked.device === device && stacked.pool !== undefined && !stacked.pool.closed ? stacked.pool : undefined);
      const outputs = batch.map((handle, k) => {
        if (into !== undefined) return into[k]!;
        const tensor = from !== undefined ? from.allocate([...handle.shape], handle.dtype) : Tensor.empty([...handle.shape], handle.dtype, { device });
        made.push(tensor);
        return tensor;
      });
      const bytes = first.byteLength;
      // The stacked tensor is complete: UCX finished receiving it.
      await client.copyBlocks(bytes, outputs.map((dst, k) => ({ dst, dstOffset: 0, src: stacked, srcOffset: k * bytes })), { sourcesReady: true });
      const info = callInfo(result);
      return info === undefined ? outputs : outputs.map((tensor) => attachCallInfo(tensor, info));
    } catch (error) {
      for (const tensor of made) tensor.release();
      throw error;
    } finally {
      stacked.release();
    }
  }

  /** One gdrpc.Owner/pullMany call for handles of one dtype and shape that land alike. */
  static async #pullBatch(client: OwnerClient, batch: RemoteTensor[], landing: Landing, into: Tensor[] | undefined): Promise<Tensor[]> {
    const first = batch[0]!;
    const element = fixedTensorType(first.dtype, first.shape, placementOf(landingDevice(landing)));
    const method: MethodDescriptor = {
      name: 'pullMany', service: OWNER_SERVICE, clientStreaming: false, serverStreaming: false,
      args: PULL_MANY_ARGS,
      results: [{ name: 'ts', type: { kind: 'list', element } }],
    };
    const pool = landing.pool;
    // Each result tensor is allocated with its field, "... results.ts[k]": into[k] is its place.
    const allocate = into !== undefined ? (_shape: number[], _dtype: DType, _placement: Placement, field: string) => lentTensor(into[Number(/\[(\d+)\]$/.exec(field)?.[1] ?? NaN)]!)
      : pool !== undefined ? (shape: number[], dtype: DType) => pool.allocate(shape, dtype) : undefined;
    const result = await client.unary(method, { xs: batch.map((h) => h.wire.x!), ss: batch.map((h) => h.wire.s!) }, allocate);
    const tensors = result.ts as Tensor[];
    // Each tensor carries the report of its own transfer: callInfo(tensor).
    const info = callInfo(result);
    if (info === undefined) return tensors;
    return tensors.map((tensor, k) => attachCallInfo(tensor, { ...info, transfers: info.transfers.filter((t) => t.argument === `ts[${k}]`) }));
  }

  #dialer(): OwnerDialer {
    if (this.#dial === undefined) throw new GdrpcError(Code.FAILED_PRECONDITION, 'this RemoteTensor was not received in a call: nothing to pull it through');
    return this.#dial;
  }

  #checkInto(into: Tensor | undefined): void {
    if (into !== undefined && (into.dtype !== this.dtype || into.byteLength !== this.byteLength)) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `pull into a ${into.dtype} tensor of ${into.byteLength} bytes; the handle holds ${this.dtype}, ${this.byteLength} bytes`);
    }
  }

  /** One pull over a connection to the owner: gdrpc.Owner/pull answers with the tensor. */
  async #pullThrough(client: OwnerClient, landing: Landing): Promise<Tensor> {
    const { into, pool } = landing;
    const placement = placementOf(landingDevice(landing));
    const method: MethodDescriptor = {
      name: 'pull', service: OWNER_SERVICE, clientStreaming: false, serverStreaming: false,
      args: [{ name: 'x', type: { kind: 'scalar', name: 'u32' } }, { name: 's', type: { kind: 'scalar', name: 'bytes' } }],
      results: [{ name: 't', type: fixedTensorType(this.dtype, this.shape, placement) }],
    };
    const allocate = into !== undefined ? () => lentTensor(into)
      : pool !== undefined ? (shape: number[], dtype: DType) => pool.allocate(shape, dtype) : undefined;
    const result = await client.unary(method, { x: this.wire.x!, s: this.wire.s! }, allocate);
    // The pull's transfer report goes with the tensor: callInfo(tensor).
    const info = callInfo(result);
    return info === undefined ? result.t as Tensor : attachCallInfo(result.t as Tensor, info);
  }
}

/** `list` as u32 block indices, each below `count`; INVALID_ARGUMENT naming `what` otherwise. */
function blockIndices(what: string, list: ArrayLike<number>, count: number): Uint32Array {
  if (typeof list !== 'object' || list === null || !Number.isSafeInteger(list.length) || list.length === 0) throw new GdrpcError(Code.INVALID_ARGUMENT, `RemoteTensor.pullBlocks: ${what} must list one or more blocks`);
  const indices = new Uint32Array(list.length);
  for (let k = 0; k < list.length; k += 1) {
    const index = list[k];
    if (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index >= count) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `RemoteTensor.pullBlocks: ${what}[${k}] = ${String(index)} is not a block index below ${count}`);
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

function landingDevice(landing: Landing): Device {
  return landing.into?.device ?? landing.pool?.device ?? landing.device ?? 'cpu';
}

function placementOf(device: Device): Placement {
  return device === 'cpu' ? { kind: 'host' } : { kind: 'cuda', device: Number(device.slice(5)) };
}

/** A tensor type of fixed dimensions, as pulls describe what they receive and owners what they send. */
export function fixedTensorType(dtype: DType, shape: readonly number[], placement: Placement): TypeRef {
  return { kind: 'tensor', dtype, shape: shape.map((size) => ({ kind: 'fixed' as const, size })), placement };
}

/** Whether `error` is an owner's answer that it has no such method (an owner before pullMany). */
function isUnknownMethod(error: unknown): boolean {
  return error instanceof GdrpcError && error.code === Code.NOT_FOUND && error.rawMessage.startsWith('unknown method');
}

/** The result field a pull answers with, shaped like the handle's tensor. */
export function pullResultFields(tensor: Tensor): MethodDescriptor['results'] {
  return [{ name: 't', type: fixedTensorType(tensor.dtype, tensor.shape, { kind: 'host' }) }];
}

/** Closes a pull's connection once the owner's reports of what it sent have come (SENT), so that
 *  the pulled tensors' callInfo can say how UCX moved them (confirmedCallInfo waits for that).
 *  The pull does not wait: the connection lingers until then, at most its transfer timeout. */
function closeWhenReported(client: OwnerClient, tensors: ReadonlyArray<Tensor | undefined>): void {
  const transfers = tensors.flatMap((tensor) => (tensor === undefined ? [] : callInfo(tensor)?.transfers ?? []));
  void confirmTransfers(transfers).then(() => client.close()).catch(() => { /* closing a pull's own connection: nothing to tell */ });
}
