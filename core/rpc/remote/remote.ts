// Remote tensors (`@remote` placement): the bytes stay with their owner, the receiver gets a
// handle that it (or anyone it passes the handle to) pulls from the owner through the reserved
// method gdrpc.Owner/pull (docs/wire.md "Remote handle"). The owner's table is its runtime's
// (remote-owner.ts); a handle pulls through a Client on the runtime it arrived on, which the side
// that decoded it hands over as an OwnerDialer.
import { Code, GdrpcError } from '../../errors.ts';
import { Tensor, TensorPool, type Device } from '../../tensor/index.ts';
import { isDevice } from '../../tensor/device.ts';
import { Accept, checkOptions, rule, type OptionRules } from '../../tensor/options.ts';
import type { TensorWire } from '../../wire/frames.ts';
import type { DType, MethodDescriptor, Placement } from '../../schema/descriptor.ts';
import type { TransferScope } from '../movers/mover.ts';
import { attachCallInfo, callInfo } from '../movers/call-info.ts';
import { Runtime } from '../runtime/runtime.ts';

/** Service name of the owner side of remote tensors. */
export const OWNER_SERVICE = 'gdrpc.Owner';

/** One pull from an owner: a Client made for it. */
export interface OwnerClient {
  unary(method: MethodDescriptor, args: Record<string, unknown>, allocate: ((shape: number[], dtype: DType) => Tensor) | undefined): Promise<Record<string, unknown>>;
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

/** Options of RemoteTensor.pull. */
export interface PullOptions { device?: Device; into?: Tensor; pool?: TensorPool; token?: string }

/** Options of RemoteTensor.pullAll: pull's, with `into` one tensor per handle, and how many pulls
 *  one connection keeps in flight. */
export interface PullAllOptions { device?: Device; into?: readonly Tensor[]; pool?: TensorPool; token?: string; maxInFlight?: number }

/** Pulls one connection keeps in flight by default (a server's maxCallsPerConnection is 256). */
export const DEFAULT_PULLS_IN_FLIGHT = 64;

const DEVICE = rule(`'cpu' or 'cuda:N'`, isDevice);
const POOL = rule('a TensorPool', (value) => value instanceof TensorPool);
const PULL_OPTIONS: OptionRules<PullOptions> = {
  device: DEVICE, into: rule('a Tensor', (value) => value instanceof Tensor), pool: POOL, token: Accept.nonEmptyString,
};
const PULL_ALL_OPTIONS: OptionRules<PullAllOptions> = {
  device: DEVICE, pool: POOL, token: Accept.nonEmptyString, maxInFlight: Accept.integer(1, 256, 'pulls'),
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
    const client = await dial(this.owner, options.token);
    try {
      return await this.#pullThrough(client, options);
    } finally {
      await client.close();
    }
  }

  /** Fetches many handles as one operation: one connection per owner (not one per handle), up to
   *  `maxInFlight` pulls in flight on each, one promise for all. The tensors come back in the
   *  order of `handles`. If any pull fails, the others are let finish, every tensor this call
   *  made is released, and the first failure is thrown; tensors given in `into` stay the caller's. */
  static async pullAll(handles: readonly RemoteTensor[], options: PullAllOptions = {}): Promise<Tensor[]> {
    if (!Array.isArray(handles) || !handles.every((h) => h instanceof RemoteTensor)) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, 'RemoteTensor.pullAll takes an array of RemoteTensors');
    }
    checkOptions('RemoteTensor.pullAll options', options, PULL_ALL_OPTIONS);
    const into = options.into;
    if (into !== undefined && into.length !== handles.length) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `RemoteTensor.pullAll: ${into.length} tensors in into for ${handles.length} handles`);
    }
    // One connection per owner and dialer (the runtime a handle arrived on), each with its queue.
    const groups = new Map<OwnerDialer, Map<string, number[]>>();
    for (const [i, handle] of handles.entries()) {
      handle.#checkInto(into?.[i]);
      const byOwner = groups.get(handle.#dialer()) ?? new Map<string, number[]>();
      groups.set(handle.#dialer(), byOwner);
      byOwner.set(handle.owner, [...(byOwner.get(handle.owner) ?? []), i]);
    }
    const results: Array<Tensor | undefined> = new Array(handles.length);
    const failures: unknown[] = [];
    const inFlight = options.maxInFlight ?? DEFAULT_PULLS_IN_FLIGHT;
    const landing = (i: number): Landing => (into !== undefined ? { into: into[i]! } : options.pool !== undefined ? { pool: options.pool } : { device: options.device ?? 'cpu' });
    const pullGroup = async (dial: OwnerDialer, owner: string, indices: number[]): Promise<void> => {
      const client = await dial(owner, options.token);
      try {
        let next = 0;
        const lane = async (): Promise<void> => {
          while (next < indices.length && failures.length === 0) {
            const i = indices[next++]!;
            results[i] = await handles[i]!.#pullThrough(client, landing(i));
          }
        };
        await Promise.all(Array.from({ length: Math.min(inFlight, indices.length) }, () => lane().catch((error: unknown) => { failures.push(error); })));
      } finally {
        await client.close();
      }
    };
    const groupRuns = [...groups].flatMap(([dial, byOwner]) => [...byOwner].map(([owner, indices]) => pullGroup(dial, owner, indices)));
    for (const outcome of await Promise.allSettled(groupRuns)) if (outcome.status === 'rejected') failures.push(outcome.reason);
    if (failures.length > 0) {
      if (into === undefined) for (const tensor of results) tensor?.release();
      throw failures[0];
    }
    return results as Tensor[];
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
    const device = into?.device ?? pool?.device ?? landing.device ?? 'cpu';
    const placement: Placement = device === 'cpu' ? { kind: 'host' } : { kind: 'cuda', device: Number(device.slice(5)) };
    const method: MethodDescriptor = {
      name: 'pull', service: OWNER_SERVICE, clientStreaming: false, serverStreaming: false,
      args: [{ name: 'x', type: { kind: 'scalar', name: 'u32' } }, { name: 's', type: { kind: 'scalar', name: 'bytes' } }],
      results: [{ name: 't', type: { kind: 'tensor', dtype: this.dtype, shape: this.shape.map((size) => ({ kind: 'fixed', size })), placement } }],
    };
    const allocate = into !== undefined ? () => into
      : pool !== undefined ? (shape: number[], dtype: DType) => pool.allocate(shape, dtype) : undefined;
    const result = await client.unary(method, { x: this.wire.x!, s: this.wire.s! }, allocate);
    // The pull's transfer report goes with the tensor: callInfo(tensor).
    const info = callInfo(result);
    return info === undefined ? result.t as Tensor : attachCallInfo(result.t as Tensor, info);
  }
}

/** The result field a pull answers with, shaped like the handle's tensor. */
export function pullResultFields(tensor: Tensor): MethodDescriptor['results'] {
  return [{ name: 't', type: { kind: 'tensor', dtype: tensor.dtype, shape: tensor.shape.map((size) => ({ kind: 'fixed' as const, size })), placement: { kind: 'host' } } }];
}
