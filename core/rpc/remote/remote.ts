// Remote tensors (`@remote` placement): the bytes stay with their owner, the receiver gets a
// handle that it (or anyone it passes the handle to) pulls from the owner through the reserved
// method gdrpc.Owner/pull (docs/wire.md "Remote handle"), many at once (pullAll), or block by
// block (pullBlocks, block-table.ts). The owner's table is its runtime's (remote-owner.ts); a
// handle pulls through a Client on the runtime it arrived on, which the side that decoded it
// hands over as an OwnerDialer (owner-client.ts).
import { Code, GdrpcError } from '../../errors.ts';
import { Tensor, type Device, type TensorPool } from '../../tensor/index.ts';
import { Accept, checkOptions, rule, type OptionRules } from '../../tensor/options.ts';
import type { TensorWire } from '../../wire/frames.ts';
import type { DType, MethodDescriptor, Placement } from '../../schema/descriptor.ts';
import type { TransferScope } from '../movers/mover.ts';
import { attachCallInfo, callInfo } from '../movers/call-info.ts';
import { Runtime } from '../runtime/runtime.ts';
import { lentTensor } from './lent.ts';
import { planBlockPull, PULL_BLOCKS_OPTIONS, runBlockPull, type PullBlocksOptions } from './block-table.ts';
import { runDirectPull } from './direct.ts';
import { closeWhenReported, DEVICE, fixedTensorType, HANDLE_ARGS, isUnknownMethod, landingDevice, OWNER_SERVICE, OwnerConnection, placementOf, POOL, PULL_LIMIT_OPTIONS, pullLimits, VIA, type Landing, type OwnerClient, type OwnerDialer, type PullLimits } from './owner-client.ts';

/** A tensor exposed for a call: its handle descriptor, when the exposure ends (pulled, its tensor
 *  released, the connection gone), and what ends it now (idempotent). */
export interface Exposed { wire: TensorWire; ended: Promise<void>; end: () => void }

/** Registers `tensor` as remote for the call of `scope`, on its connection's runtime; returns the
 *  exposure (its handle descriptor among it). Released when the call ends or the connection dies
 *  (exposures), or after one pull. */
export function exposeRemote(tensor: Tensor, scope: TransferScope): Exposed {
  const { connection, call } = scope;
  let told!: () => void;
  const ended = new Promise<void>((resolve) => { told = resolve; });
  let exposure = 0;
  const wire = connection.runtime.owner.expose(tensor, connection.peer, (forget) => {
    exposure = connection.exposures.add(call, () => { forget(); told(); });
    return () => connection.exposures.release(exposure);
  });
  // Ends the exposure now (its frame did not leave, or it was not pulled in time); idempotent.
  return { wire, ended, end: () => connection.exposures.release(exposure) };
}

/** Number of remote tensors currently exposed on `runtime` (default: the default runtime), for leak checks. */
export function remoteExposures(runtime: Runtime | undefined = Runtime.current()): number {
  return runtime?.owner.size ?? 0;
}

/** Options of RemoteTensor.pull; `via` pulls over a connection made with connect() (kept open). */
export interface PullOptions {
  device?: Device; into?: Tensor; pool?: TensorPool; token?: string; via?: OwnerConnection;
  /** Milliseconds from now or a Date, for the whole pull (default 60 s; Infinity: none), and a signal that cancels it. */
  deadline?: number | Date; signal?: AbortSignal;
}

/** Options of RemoteTensor.pullAll: pull's, with `into` one tensor per handle, and how many pulls
 *  one connection keeps in flight. */
export interface PullAllOptions {
  device?: Device; into?: readonly Tensor[]; pool?: TensorPool; token?: string; maxInFlight?: number;
  /** As PullOptions: for all of the pulls (default 60 s). */
  deadline?: number | Date; signal?: AbortSignal;
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

const PULL_OPTIONS: OptionRules<PullOptions> = {
  device: DEVICE, into: rule('a Tensor', (value) => value instanceof Tensor), pool: POOL, token: Accept.nonEmptyString, via: VIA, ...PULL_LIMIT_OPTIONS,
};
const PULL_ALL_OPTIONS: OptionRules<PullAllOptions> = {
  device: DEVICE, pool: POOL, token: Accept.nonEmptyString, maxInFlight: Accept.integer(1, 65_536, 'tensors'), ...PULL_LIMIT_OPTIONS,
  into: rule('an array of Tensors', (value) => Array.isArray(value) && value.every((t) => t instanceof Tensor)),
};

/** Owners a pullAll dials at once. */
export const OWNERS_AT_ONCE = 8;

/** Why a pull may not go on (its signal aborted, its deadline passed); undefined while it may. */
function pastLimits(limits: PullLimits): GdrpcError | undefined {
  if (limits.signal?.aborted === true) return GdrpcError.from(limits.signal.reason, Code.CANCELLED);
  if (limits.deadline !== undefined && Date.now() >= limits.deadline.getTime()) return new GdrpcError(Code.DEADLINE_EXCEEDED, 'RemoteTensor.pullAll: deadline exceeded before every owner was reached');
  return undefined;
}

/** One RemoteTensor.pullAll under way: what it was given, where each handle lands, its limits,
 *  the tensors pulled so far (by place in `handles`), the failures so far, and how many batches
 *  each connection keeps in flight. */
interface PullAllRun {
  handles: readonly RemoteTensor[]; options: PullAllOptions; into: readonly Tensor[] | undefined; landing: (i: number) => Landing;
  limits: PullLimits; results: Array<Tensor | undefined>; failures: unknown[]; lanes: number;
}

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
    const limits = pullLimits(options);
    return this.#pullOver(dial, options, limits, (client) => this.#pullThrough(client, options, limits));
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
   *  first dimension). The owner gathers the blocks of a part into one tensor that moves as one
   *  message (gdrpc.Owner/pullBlocks; parts of up to 32 MiB unless partBytes says, up to 64 MiB,
   *  and 16,384 blocks; 2 parts in flight unless maxInFlight says). They land in order in a new
   *  [n, ...block] tensor (from `pool`, or on `device`), or in `into`: block k at block `at[k]` of
   *  it (default k), copied out by one kernel launch on a GPU. The handle stays pullable.
   *  Resolves to the tensor the blocks are in; a failure releases what it made and may leave
   *  `into` partly written (block-table.ts). */
  async pullBlocks(blocks: ArrayLike<number>, options: PullBlocksOptions = {}): Promise<Tensor> {
    checkOptions('RemoteTensor.pullBlocks options', options, PULL_BLOCKS_OPTIONS);
    const plan = planBlockPull(this, blocks, options);
    return this.#pullOver(this.#dialer(), options, plan.limits, async (client) => (plan.direct ? await runDirectPull(client, plan, options.via) : undefined) ?? runBlockPull(client, plan, options.via));
  }

  /** Runs `pull` over `via` when given (left open), else over a connection of its own: closed on
   *  failure, or once the owner has reported how it sent (closeWhenReported). */
  async #pullOver(dial: OwnerDialer, options: { via?: OwnerConnection; token?: string }, limits: PullLimits, pull: (client: OwnerClient) => Promise<Tensor>): Promise<Tensor> {
    const { via } = options;
    if (via !== undefined) {
      if (options.token !== undefined) throw new GdrpcError(Code.INVALID_ARGUMENT, 'a pull via a connection presents the token given to connect(), not one of its own');
      return pull(via.clientFor(this, dial));
    }
    const client = await dial(this.owner, options.token, limits);
    let tensor: Tensor;
    try {
      tensor = await pull(client);
    } catch (error) {
      await client.close();
      throw error;
    }
    closeWhenReported(client, [tensor]);
    return tensor;
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
    const limits = pullLimits(options);
    const landing = (i: number): Landing => (into !== undefined ? { into: into[i]! } : options.pool !== undefined ? { pool: options.pool } : { device: options.device ?? 'cpu' });
    const groups = RemoteTensor.#batchByOwner(handles, into, landing);
    const results: Array<Tensor | undefined> = new Array(handles.length);
    const failures: unknown[] = [];
    const lanes = Math.max(1, Math.ceil((options.maxInFlight ?? DEFAULT_PULLS_IN_FLIGHT) / PULL_BATCH));
    const pulls: PullAllRun = { handles, options, into, landing, limits, results, failures, lanes };
    // OWNERS_AT_ONCE owners at a time, each dialled only while the pull's limits hold: one result's
    // 5,000 handles naming one owner spelled 5,000 ways opened 4,792 connections at once (9,843
    // file descriptors) and went on dialling past the pull's deadline (a helper session's owner,
    // 2026-12-06).
    const work = [...groups].flatMap(([dial, byOwner]) => [...byOwner].map(([owner, batches]) => () => RemoteTensor.#pullGroup(pulls, dial, owner, batches)));
    let nextGroup = 0;
    const dialler = async (): Promise<void> => {
      while (nextGroup < work.length && failures.length === 0) {
        const run = work[nextGroup++]!;
        const over = pastLimits(limits);
        if (over !== undefined) {
          failures.push(over);
          return;
        }
        await run().catch((error: unknown) => { failures.push(error); });
      }
    };
    await Promise.all(Array.from({ length: Math.min(OWNERS_AT_ONCE, work.length) }, dialler));
    if (failures.length > 0) {
      if (into === undefined) for (const tensor of results) tensor?.release();
      throw failures[0];
    }
    return results as Tensor[];
  }

  /** pullAll's handles, as their places in `handles`, in batches per dialer and owner. */
  static #batchByOwner(handles: readonly RemoteTensor[], into: readonly Tensor[] | undefined, landing: (i: number) => Landing): Map<OwnerDialer, Map<string, number[][]>> {
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
    return groups;
  }

  /** pullAll's pulls from one owner over one connection of their own, `pulls.lanes` batches in
   *  flight, each asked for the best way the owner answers. */
  static async #pullGroup(pulls: PullAllRun, dial: OwnerDialer, owner: string, batches: number[][]): Promise<void> {
    const { handles, options, into, landing, limits, results, failures, lanes } = pulls;
    const client = await dial(owner, options.token, limits);
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
              tensors = await RemoteTensor.#pullStacked(client, batchHandles, landing(batch[0]!), batchInto, limits);
            } catch (error) {
              if (!isUnknownMethod(error)) throw error;
              stackAnswered = false;
            }
          }
          if (tensors === undefined && manyAnswered) {
            try {
              tensors = await RemoteTensor.#pullBatch(client, batchHandles, landing(batch[0]!), batchInto, limits);
            } catch (error) {
              if (!isUnknownMethod(error)) throw error;
              manyAnswered = false;
            }
          }
          if (tensors !== undefined) for (const [k, i] of batch.entries()) results[i] = tensors[k];
          else for (const i of batch) results[i] = await handles[i]!.#pullThrough(client, landing(i), limits);
        }
      };
      await Promise.all(Array.from({ length: Math.min(lanes, batches.length) }, () => lane().catch((error: unknown) => { failures.push(error); })));
      pulled = failures.length === 0;
    } finally {
      if (pulled) closeWhenReported(client, batches.flat().map((i) => results[i]));
      else await client.close();
    }
  }

  /** One gdrpc.Owner/pullStacked call for handles of one dtype and shape that land alike: the
   *  owner gathers them into one [n, ...shape] tensor, which moves as one message and is then
   *  copied out into one tensor per handle (copyBlocks: one kernel launch on a GPU). Each tensor
   *  carries the call's report, whose one transfer is the stacked tensor `t`. */
  static async #pullStacked(client: OwnerClient, batch: RemoteTensor[], landing: Landing, into: Tensor[] | undefined, limits: PullLimits): Promise<Tensor[]> {
    const first = batch[0]!;
    const device = landingDevice(landing);
    const method: MethodDescriptor = {
      name: 'pullStacked', service: OWNER_SERVICE, clientStreaming: false, serverStreaming: false,
      args: PULL_MANY_ARGS,
      results: [{ name: 't', type: fixedTensorType(first.dtype, [batch.length, ...first.shape], placementOf(device)) }],
    };
    const result = await client.unary(method, { xs: batch.map((h) => h.wire.x!), ss: batch.map((h) => h.wire.s!) }, undefined, limits);
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
  static async #pullBatch(client: OwnerClient, batch: RemoteTensor[], landing: Landing, into: Tensor[] | undefined, limits: PullLimits): Promise<Tensor[]> {
    const first = batch[0]!;
    const element = fixedTensorType(first.dtype, first.shape, placementOf(landingDevice(landing)));
    const method: MethodDescriptor = {
      name: 'pullMany', service: OWNER_SERVICE, clientStreaming: false, serverStreaming: false,
      args: PULL_MANY_ARGS,
      // One tensor per handle, checked before any is allocated: an owner that answered with more
      // had the extras allocated (from `pool`, never released) and with fewer left holes.
      results: [{ name: 'ts', type: { kind: 'list', element, length: batch.length } }],
    };
    const pool = landing.pool;
    // Each result tensor is allocated with its field, "... results.ts[k]": into[k] is its place.
    const allocate = into !== undefined ? (_shape: number[], _dtype: DType, _placement: Placement, field: string) => lentTensor(into[Number(/\[(\d+)\]$/.exec(field)?.[1] ?? NaN)]!)
      : pool !== undefined ? (shape: number[], dtype: DType) => pool.allocate(shape, dtype) : undefined;
    const result = await client.unary(method, { xs: batch.map((h) => h.wire.x!), ss: batch.map((h) => h.wire.s!) }, allocate, limits);
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
  async #pullThrough(client: OwnerClient, landing: Landing, limits: PullLimits): Promise<Tensor> {
    const { into, pool } = landing;
    const placement = placementOf(landingDevice(landing));
    const method: MethodDescriptor = {
      name: 'pull', service: OWNER_SERVICE, clientStreaming: false, serverStreaming: false,
      args: HANDLE_ARGS,
      results: [{ name: 't', type: fixedTensorType(this.dtype, this.shape, placement) }],
    };
    const allocate = into !== undefined ? () => lentTensor(into)
      : pool !== undefined ? (shape: number[], dtype: DType) => pool.allocate(shape, dtype) : undefined;
    const result = await client.unary(method, { x: this.wire.x!, s: this.wire.s! }, allocate, limits);
    // The pull's transfer report goes with the tensor: callInfo(tensor).
    const info = callInfo(result);
    return info === undefined ? result.t as Tensor : attachCallInfo(result.t as Tensor, info);
  }
}
