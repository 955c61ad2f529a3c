// The puller's side of an owner of remote tensors: the client a pull talks through (one per
// pull, or one made by RemoteTensor.connect and shared as `via`), what a pull asks the owner's
// reserved service gdrpc.Owner for and where its answer lands, and the closing of a pull's own
// connection once the owner has said how it sent (docs/wire.md "Remote handle").
import { Code, GdrpcError } from '../../errors.ts';
import { TensorPool, type Device, type Tensor } from '../../tensor/index.ts';
import { isDevice } from '../../tensor/device.ts';
import { Accept, rule } from '../../tensor/options.ts';
import type { DType, MethodDescriptor, Placement, TypeRef } from '../../schema/descriptor.ts';
import { callInfo, confirmTransfers } from '../movers/call-info.ts';
import type { BlockCopies } from '../../compute/blocks.ts';
import type { Mapping } from '../../compute/ipc.ts';

/** Service name of the owner side of remote tensors. */
export const OWNER_SERVICE = 'gdrpc.Owner';

/** The arguments every gdrpc.Owner method starts with: the handle `x` and its capability `s`. */
export const HANDLE_ARGS: MethodDescriptor['args'] = [{ name: 'x', type: { kind: 'scalar', name: 'u32' } }, { name: 's', type: { kind: 'scalar', name: 'bytes' } }];

/** Whether `error` is an owner's answer that it has no such method (an owner that predates it). */
export function isUnknownMethod(error: unknown): boolean {
  return error instanceof GdrpcError && error.code === Code.NOT_FOUND && error.rawMessage.startsWith('unknown method');
}

/** How long a pull, every call it makes to the owner included, may take when its caller gives no
 *  deadline: an owner that stays connected but never answers would otherwise hold the pull, and
 *  the connection it made, for ever (a handler pulling from a hostile caller kept both past the
 *  call's end: 1,024 connections after 1,024 calls, scratch). */
export const DEFAULT_PULL_DEADLINE_MS = 60_000;

/** What bounds a pull's calls to the owner: its caller's signal, and one deadline for them all. */
export interface PullLimits { readonly signal?: AbortSignal; readonly deadline?: Date }

/** The limits of a pull starting now: `deadline` (milliseconds from now or a Date; Infinity:
 *  none) or DEFAULT_PULL_DEADLINE_MS from now, and `signal`. */
export function pullLimits(options: { signal?: AbortSignal; deadline?: number | Date }): PullLimits {
  const deadline = options.deadline ?? DEFAULT_PULL_DEADLINE_MS;
  // Infinity, or a span past what a Date holds, is no deadline (as a call's deadline).
  const at = deadline instanceof Date ? deadline : new Date(Date.now() + deadline);
  return { ...(options.signal !== undefined ? { signal: options.signal } : {}), ...(Number.isNaN(at.getTime()) ? {} : { deadline: at }) };
}

/** The option rules of a pull's `signal` and `deadline`, in each pull's table. */
export const PULL_LIMIT_OPTIONS = { signal: Accept.signal, deadline: Accept.deadline };

/** One pull from an owner: a Client made for it. */
export interface OwnerClient {
  /** `allocate` gets each result tensor's field ("... results.ts[3]") besides its shape and dtype;
   *  `limits` are the pull's signal and deadline. */
  unary(method: MethodDescriptor, args: Record<string, unknown>, allocate: ((shape: number[], dtype: DType, placement: Placement, field: string) => Tensor) | undefined, limits: PullLimits): Promise<Record<string, unknown>>;
  /** Copies a stacked answer out (the runtime's BlockCopier). */
  copyBlocks(blockBytes: number, copies: BlockCopies, options?: { sourcesReady?: boolean }): Promise<void>;
  /** Where pullBlocks receives its parts on `device` (the runtime's pool there, mapped once). */
  staging(device: Device): TensorPool;
  close(): Promise<void>;
}

/** Connects a Client to the owner at `owner` ("host:port"), on the runtime the handle came to,
 *  within a pull's `limits` when given (its deadline and signal end the connect too). */
export type OwnerDialer = ((owner: string, token: string | undefined, limits?: PullLimits) => Promise<OwnerClient>) & {
  /** The runtime the dialer pulls on: dialers of one runtime share connections (`via`). */
  readonly runtime?: object;
};

/** Gather staging an owner holds for one connection (OWNER_STAGING_BYTES_PER_CONNECTION): the
 *  block-table pulls sharing one OwnerConnection keep their parts in flight under it together. */
const SHARED_CONNECTION_BYTES = 512 << 20;

/** An owner's answer to gdrpc.Owner/map: the IPC handle of the allocation, the tensor's offset in
 *  it and the tensor's length as the owner knows it. */
export interface DirectGrant { readonly handle: Uint8Array; readonly offset: number; readonly byteLength: number }
/** Answers to gdrpc.Owner/map one connection keeps. */
const GRANTS_KEPT = 256;
/** Mappings of an owner's allocations one connection keeps while no pull uses them. */
const MAPPINGS_KEPT = 8;

/** A connection to the owner of remote tensors, made once (RemoteTensor.connect) and used by
 *  pulls and block-table pulls given it as `via`: a worker that pulls from the same peer again
 *  and again (a decode worker from its prefill worker) saves a connection and handshake per
 *  pull. Pulls never close it; close() does (calls on it still running fail). */
export class OwnerConnection {
  readonly #client: OwnerClient;
  readonly #dial: OwnerDialer;
  #closed = false;
  /** Bytes of parts in flight over this connection, and the parts waiting for room. */
  #inFlight = 0;
  readonly #waiting: Array<{ bytes: number; go: () => void }> = [];
  /** The owner's allocations mapped for direct pulls, with the pulls using each now, in the order
   *  they were last used: pulls share a mapping, and up to MAPPINGS_KEPT unused ones stay mapped
   *  for the next pull (opening one costs milliseconds), as UCX's own cuda_ipc cache keeps a
   *  peer's buffers; the rest, and all of them at close(), are unmapped. */
  readonly #mappings = new Map<string, { mapping: Mapping; users: number }>();
  /** The owner declined direct pulls, or its memory cannot be mapped here. */
  #directDeclined = false;
  /** What the owner answered gdrpc.Owner/map for a handle (by handle and capability), so that
   *  pulling the same handle again skips the question; at most GRANTS_KEPT, the oldest dropped. */
  readonly #grants = new Map<string, DirectGrant>();

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
    this.#grants.clear();
    for (const [key, held] of this.#mappings) {
      if (held.users > 0) continue;  // unmapped by its last user
      this.#mappings.delete(key);
      held.mapping.close();
    }
    await this.#client.close();
  }

  /** Whether direct pulls over this connection go two-sided at once: the owner declined them, or
   *  its memory could not be mapped here. */
  get directDeclined(): boolean { return this.#directDeclined; }

  /** Says that later direct pulls over this connection go two-sided at once. */
  declineDirect(): void { this.#directDeclined = true; }

  /** The owner's answer to gdrpc.Owner/map for the handle `key`, when this connection has it. */
  grantOf(key: string): DirectGrant | undefined {
    return this.#grants.get(key);
  }

  /** Keeps the owner's answer for `key`, or forgets it (undefined: the handle is gone). */
  keepGrant(key: string, grant: DirectGrant | undefined): void {
    this.#grants.delete(key);
    if (grant === undefined) return;
    this.#grants.set(key, grant);
    if (this.#grants.size > GRANTS_KEPT) this.#grants.delete(this.#grants.keys().next().value!);
  }

  /** The mapping of an owner's allocation for a direct pull: the one this connection has under
   *  `key`, else made by `open`. Resolves to it and what lets it go (`forget`: unmap it once
   *  unused, as after the owner said the handle is gone). */
  useMapping(key: string, open: () => Mapping): { mapping: Mapping; release: (forget?: boolean) => void } {
    let held = this.#mappings.get(key);
    if (held === undefined) held = { mapping: open(), users: 0 };
    this.#mappings.delete(key);
    this.#mappings.set(key, held);  // the most recently used last
    const entry = held;
    entry.users += 1;
    let released = false;
    return {
      mapping: entry.mapping,
      release: (forget = false) => {
        if (released) return;
        released = true;
        entry.users -= 1;
        if (entry.users > 0) return;
        if (forget || this.#closed) {
          if (this.#mappings.get(key) === entry) this.#mappings.delete(key);
          entry.mapping.close();
          return;
        }
        let idle = 0;
        for (const other of this.#mappings.values()) if (other.users === 0) idle += 1;
        for (const [otherKey, other] of this.#mappings) {
          if (idle <= MAPPINGS_KEPT) break;
          if (other.users > 0) continue;
          this.#mappings.delete(otherKey);
          other.mapping.close();
          idle -= 1;
        }
      },
    };
  }

  /** The client for a pull of `handle` (pulled through `dial`): FAILED_PRECONDITION when closed,
   *  INVALID_ARGUMENT when the handle has another owner or came to another runtime. */
  clientFor(handle: { readonly owner: string }, dial: OwnerDialer): OwnerClient {
    if (this.#closed) throw new GdrpcError(Code.FAILED_PRECONDITION, `the connection to ${this.owner} is closed`);
    const sameRuntime = dial === this.#dial || (dial.runtime !== undefined && dial.runtime === this.#dial.runtime);
    if (handle.owner !== this.owner || !sameRuntime) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `a handle owned by ${handle.owner} cannot be pulled via the connection to ${this.owner}${handle.owner === this.owner ? ' made on another runtime' : ''}`);
    }
    return this.#client;
  }

  /** Room for a part of `bytes` among the parts in flight over this connection (the owner's
   *  staging for one connection, shared by every pull over it): resolves, in order, to what gives
   *  the room back. */
  room(bytes: number): Promise<() => void> {
    const grant = (): (() => void) => {
      this.#inFlight += bytes;
      let given = false;
      return () => {
        if (given) return;
        given = true;
        this.#inFlight -= bytes;
        while (this.#waiting.length > 0 && this.#inFlight + this.#waiting[0]!.bytes <= SHARED_CONNECTION_BYTES) this.#waiting.shift()!.go();
      };
    };
    if (this.#waiting.length === 0 && this.#inFlight + bytes <= SHARED_CONNECTION_BYTES) return Promise.resolve(grant());
    return new Promise((resolve) => { this.#waiting.push({ bytes, go: () => resolve(grant()) }); });
  }
}


/** Where one pull lands: a given tensor, a pool, or a device (a new tensor, or the results pool). */
export interface Landing { into?: Tensor; pool?: TensorPool; device?: Device }

/** Option rules pulls share. */
export const DEVICE = rule(`'cpu' or 'cuda:N'`, isDevice);
export const POOL = rule('a TensorPool', (value) => value instanceof TensorPool);
export const VIA = rule('an OwnerConnection (RemoteTensor.connect)', (value) => value instanceof OwnerConnection);

export function landingDevice(landing: Landing): Device {
  return landing.into?.device ?? landing.pool?.device ?? landing.device ?? 'cpu';
}

export function placementOf(device: Device): Placement {
  return device === 'cpu' ? { kind: 'host' } : { kind: 'cuda', device: Number(device.slice(5)) };
}

/** A tensor type of fixed dimensions, as pulls describe what they receive and owners what they send. */
export function fixedTensorType(dtype: DType, shape: readonly number[], placement: Placement): TypeRef {
  return { kind: 'tensor', dtype, shape: shape.map((size) => ({ kind: 'fixed' as const, size })), placement };
}


/** The result field a pull answers with, shaped like the handle's tensor. */
export function pullResultFields(tensor: Tensor): MethodDescriptor['results'] {
  return [{ name: 't', type: fixedTensorType(tensor.dtype, tensor.shape, { kind: 'host' }) }];
}

/** How long a pull's connection waits for the owner's reports of what it sent (closeWhenReported).
 *  An honest owner's come with the bytes; waiting the whole transfer timeout let an owner that
 *  promised reports (`rep`) and sent none keep every pull's connection 30 s: 200 pulls held 202
 *  endpoints and the runtime's whole window budget (a helper session's owner, 2026-12-06). */
export const PULL_REPORT_WAIT_MS = 1000;

/** Closes a pull's connection once the owner's reports of what it sent have come (SENT), so that
 *  the pulled tensors' callInfo can say how UCX moved them (confirmedCallInfo waits for that), or
 *  after PULL_REPORT_WAIT_MS without them. The pull does not wait. */
export function closeWhenReported(client: OwnerClient, tensors: ReadonlyArray<Tensor | undefined>): void {
  const transfers = tensors.flatMap((tensor) => (tensor === undefined ? [] : callInfo(tensor)?.transfers ?? []));
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<void>((resolve) => { timer = setTimeout(resolve, PULL_REPORT_WAIT_MS).unref(); });
  void Promise.race([confirmTransfers(transfers).catch(() => {}), late]).then(() => {
    clearTimeout(timer);
    return client.close();
  }).catch(() => { /* closing a pull's own connection: nothing to tell */ });
}
