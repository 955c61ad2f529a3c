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

const PULL_OPTIONS: OptionRules<PullOptions> = {
  device: rule(`'cpu' or 'cuda:N'`, isDevice), into: rule('a Tensor', (value) => value instanceof Tensor),
  pool: rule('a TensorPool', (value) => value instanceof TensorPool), token: Accept.nonEmptyString,
};

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
    if (this.#dial === undefined) throw new GdrpcError(Code.FAILED_PRECONDITION, 'this RemoteTensor was not received in a call: nothing to pull it through');
    const device = options.into?.device ?? options.pool?.device ?? options.device ?? 'cpu';
    const placement: Placement = device === 'cpu' ? { kind: 'host' } : { kind: 'cuda', device: Number(device.slice(5)) };
    const method: MethodDescriptor = {
      name: 'pull', service: OWNER_SERVICE, clientStreaming: false, serverStreaming: false,
      args: [{ name: 'x', type: { kind: 'scalar', name: 'u32' } }, { name: 's', type: { kind: 'scalar', name: 'bytes' } }],
      results: [{ name: 't', type: { kind: 'tensor', dtype: this.dtype, shape: this.shape.map((size) => ({ kind: 'fixed', size })), placement } }],
    };
    const into = options.into;
    if (into !== undefined && (into.dtype !== this.dtype || into.byteLength !== this.byteLength)) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `pull into a ${into.dtype} tensor of ${into.byteLength} bytes; the handle holds ${this.dtype}, ${this.byteLength} bytes`);
    }
    const allocate = into !== undefined ? () => into
      : options.pool !== undefined ? (shape: number[], dtype: DType) => options.pool!.allocate(shape, dtype) : undefined;
    const client = await this.#dial(this.owner, options.token);
    try {
      const result = await client.unary(method, { x: this.wire.x!, s: this.wire.s! }, allocate);
      // The pull's transfer report goes with the tensor: callInfo(tensor).
      const info = callInfo(result);
      return info === undefined ? result.t as Tensor : attachCallInfo(result.t as Tensor, info);
    } finally {
      await client.close();
    }
  }
}

/** The result field a pull answers with, shaped like the handle's tensor. */
export function pullResultFields(tensor: Tensor): MethodDescriptor['results'] {
  return [{ name: 't', type: { kind: 'tensor', dtype: tensor.dtype, shape: tensor.shape.map((size) => ({ kind: 'fixed' as const, size })), placement: { kind: 'host' } } }];
}
