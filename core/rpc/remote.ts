// Remote tensors (`@remote` placement): the bytes stay with their owner, the receiver gets a
// handle that it (or anyone it passes the handle to) pulls from the owner through the reserved
// method gdrpc.Owner/pull (docs/wire.md "Remote handle"). The owner serves pulls from a Server of
// its own process; the 16-byte capability makes handles unguessable, and an entry is looked up,
// never an address trusted, so a pull after release is NOT_FOUND and never reads other memory.
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { networkInterfaces } from 'node:os';
import { Code, GdrpcError } from '../errors.ts';
import { Tensor, TensorPool, type Device } from '../tensor/index.ts';
import { isDevice } from '../tensor/device.ts';
import { Accept, checkOptions, rule, type OptionRules } from '../tensor/options.ts';
import type { TensorWire } from '../wire/frames.ts';
import type { DType, MethodDescriptor, Placement } from '../schema/descriptor.ts';
import type { TransferScope } from './movers/mover.ts';
import { memoryTypeOf } from './movers/memory.ts';
import { attachCallInfo, callInfo } from './call-info.ts';

/** Service name of the owner side of remote tensors. */
export const OWNER_SERVICE = 'gdrpc.Owner';

interface Entry { tensor: Tensor; secret: Uint8Array; release: () => void }
const entries = new Map<number, Entry>();
let nextId = 1;

/** Supplied by server.ts: the address of a Server of this process that answers pulls (the first
 *  listening one, or the one serveRemoteTensors started); throws when there is none. */
let ownerListener: (() => { host: string; port: number }) | undefined;
export function setOwnerListener(provider: () => { host: string; port: number }): void {
  ownerListener = provider;
}

/** One pull from an owner: a Client made for it. */
export interface OwnerClient {
  unary(method: MethodDescriptor, args: Record<string, unknown>, allocate: ((shape: number[], dtype: DType) => Tensor) | undefined): Promise<Record<string, unknown>>;
  close(): Promise<void>;
}

/** Supplied by client.ts, which imports this module (through transfer.ts) and so cannot be
 *  imported from it: connects a Client to the owner at `owner` ("host:port"). */
let ownerDialer: ((owner: string, token: string | undefined) => Promise<OwnerClient>) | undefined;
export function setOwnerDialer(dial: (owner: string, token: string | undefined) => Promise<OwnerClient>): void {
  ownerDialer = dial;
}

/** Registers `tensor` as remote for the call of `scope`; returns its handle descriptor. */
export function exposeRemote(tensor: Tensor, scope: TransferScope): TensorWire {
  if (ownerListener === undefined) throw new GdrpcError(Code.INTERNAL, 'no server module loaded to own remote tensors');
  const listen = ownerListener();
  const x = nextId;
  nextId = nextId >= 0xffff_ffff ? 1 : nextId + 1;
  const secret = randomBytes(16);
  // Released when the call ends or the connection dies (exposures), or after one pull.
  const exposure = scope.connection.exposures.add(scope.call, () => { entries.delete(x); });
  entries.set(x, { tensor, secret, release: () => scope.connection.exposures.release(exposure) });
  return {
    dt: tensor.dtype, sh: [...tensor.shape], n: tensor.byteLength, mt: memoryTypeOf(tensor), m: 'h',
    o: `${advertisedHost(listen.host, scope.connection.peer)}:${listen.port}`, x, s: secret,
  };
}

/** The tensor behind handle `x` if `secret` matches; NOT_FOUND otherwise (unknown, released, wrong). */
export function lookupRemote(x: number, secret: Uint8Array): { tensor: Tensor; pulled: () => void } {
  const entry = entries.get(x);
  if (entry === undefined || secret.length !== entry.secret.length || !timingSafeEqual(secret, entry.secret)) {
    throw new GdrpcError(Code.NOT_FOUND, `remote tensor ${x} is unknown or has been released`);
  }
  return { tensor: entry.tensor, pulled: entry.release };
}

/** Number of remote tensors currently exposed by this process (for leak checks). */
export function remoteExposures(): number {
  return entries.size;
}

/** Options of RemoteTensor.pull. */
export interface PullOptions { device?: Device; into?: Tensor; pool?: TensorPool; token?: string }

const PULL_OPTIONS: OptionRules<PullOptions> = {
  device: rule(`'cpu' or 'cuda:N'`, isDevice), into: rule('a Tensor', (value) => value instanceof Tensor),
  pool: rule('a TensorPool', (value) => value instanceof TensorPool), token: Accept.nonEmptyString,
};

/** A handle to a tensor that stays with its owner until pulled (`@remote` placement). */
export class RemoteTensor {
  constructor(readonly wire: TensorWire) {}
  get dtype(): DType { return this.wire.dt as DType; }
  get shape(): readonly number[] { return this.wire.sh; }
  get byteLength(): number { return this.wire.n; }
  /** "host:port" of the owner. */
  get owner(): string { return this.wire.o!; }

  /** Fetches the bytes from the owner into `into`, a tensor from `pool`, or a new one on `device`. */
  async pull(options: PullOptions = {}): Promise<Tensor> {
    checkOptions('RemoteTensor.pull options', options, PULL_OPTIONS);
    if (ownerDialer === undefined) throw new GdrpcError(Code.INTERNAL, 'no client module loaded to pull remote tensors');
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
    const client = await ownerDialer(this.owner, options.token);
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

function advertisedHost(bound: string, peer: string): string {
  if (bound !== '0.0.0.0' && bound !== '::') return bound;
  const peerHost = peer.slice(0, peer.lastIndexOf(':'));
  if (peerHost === '127.0.0.1' || peerHost === 'localhost' || peerHost === '::1') return '127.0.0.1';
  for (const addresses of Object.values(networkInterfaces())) {
    for (const address of addresses ?? []) if (address.family === 'IPv4' && !address.internal) return address.address;
  }
  return '127.0.0.1';
}

/** The result field a pull answers with, shaped like the handle's tensor. */
export function pullResultFields(tensor: Tensor): MethodDescriptor['results'] {
  return [{ name: 't', type: { kind: 'tensor', dtype: tensor.dtype, shape: tensor.shape.map((size) => ({ kind: 'fixed' as const, size })), placement: { kind: 'host' } } }];
}
