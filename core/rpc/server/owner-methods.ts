// The owner side of remote tensors, served by every Server under the reserved service
// gdrpc.Owner (docs/wire.md "Remote handle"): pull (one handle), pullMany (up to
// MAX_PULLS_PER_CALL handles of one dtype and shape, each its own tensor on the wire),
// pullStacked (the same handles gathered into one [n, ...shape] tensor, one message on the wire)
// and pullBlocks (blocks of one handle's tensor by index, gathered into one tensor: a block table).
// Every method is all or nothing: one unknown handle or wrong capability fails the call NOT_FOUND
// and leaves every handle of it pullable. The methods that spend their handles (pull, pullMany,
// pullStacked) claim them first: a handle is pulled by one call at a time, and once.
import { Code, GdrpcError } from '../../errors.ts';
import { elementSize, type Device, type DType, type Tensor, type TensorPool } from '../../tensor/index.ts';
import type { BlockCopies } from '../../compute/blocks.ts';
import type { MethodDescriptor } from '../../schema/descriptor.ts';
import { MAX_PULLS_PER_CALL, MAX_STACKED_BLOCK_BYTES, PULL_MANY_ARGS } from '../remote/remote.ts';
import { blocksTile, blockShapeOf, MAX_BLOCK_PULL_BYTES, MAX_BLOCKS_PER_PULL, PULL_BLOCKS_ARGS } from '../remote/block-table.ts';
import { HANDLE_ARGS, OWNER_SERVICE, pullResultFields } from '../remote/owner-client.ts';
import { HELD_METHOD, MAP_METHOD } from '../remote/direct.ts';
import { exportAllocation } from '../../compute/ipc.ts';
import type { CallContext } from './handler-context.ts';
import type { MethodEntry } from './server-call.ts';
import type { Claim } from '../runtime/remote-owner.ts';

/** What the owner methods need from their server. */
export interface OwnerHost {
  /** The exposed tensor of handle `x`, if `secret` is its capability (NOT_FOUND otherwise). */
  lookup(x: number, secret: Uint8Array): Tensor;
  /** Handle `x` taken by a pull that spends it: as lookup, and NOT_FOUND while another pull has it. */
  claim(x: number, secret: Uint8Array): Claim;
  /** Where pullStacked gathers its tensor on `device` (a mapped pool, so the send needs no registration). */
  staging(device: Device): TensorPool;
  /** The gather (the runtime's BlockCopier); `sourcesReady` and `before` as in BlockCopier.copy. */
  copyBlocks(blockBytes: number, copies: BlockCopies, options?: { sourcesReady?: boolean; before?: () => void }): Promise<void>;
  /** Whether peers may map exposed GPU tensors' allocations (ServerOptions.directPulls). */
  readonly directPulls: boolean;
}


function entry(name: string, args: MethodDescriptor['args'], handler: MethodEntry['handler'], resultsOf: MethodEntry['resultsOf']): MethodEntry {
  return { method: { name, service: OWNER_SERVICE, clientStreaming: false, serverStreaming: false, args, results: [] }, types: {}, handler, resultsOf };
}

/** The handles of a pullMany or pullStacked call, claimed (nothing spent yet) and checked alike;
 *  on any failure none stays claimed. A handle asked for twice is INVALID_ARGUMENT. */
function claimAll(host: OwnerHost, method: string, xs: number[], ss: Uint8Array[]): Claims {
  if (xs.length !== ss.length) throw new GdrpcError(Code.INVALID_ARGUMENT, `${method}: ${xs.length} handles but ${ss.length} capabilities`);
  if (xs.length === 0 || xs.length > MAX_PULLS_PER_CALL) throw new GdrpcError(Code.INVALID_ARGUMENT, `${method} takes 1 to ${MAX_PULLS_PER_CALL} handles, got ${xs.length}`);
  if (new Set(xs).size !== xs.length) {
    const twice = xs.findIndex((x, i) => xs.indexOf(x) !== i);
    throw new GdrpcError(Code.INVALID_ARGUMENT, `${method}: handle ${xs[twice]} is asked for twice (at ${xs.indexOf(xs[twice]!)} and ${twice}); a handle is pulled once`);
  }
  const claims = new Claims();
  try {
    for (const [i, x] of xs.entries()) claims.add(host.claim(x, ss[i]!));
    const first = claims.tensors[0]!;
    const odd = claims.tensors.findIndex((tensor) => tensor.dtype !== first.dtype || tensor.shape.length !== first.shape.length || tensor.shape.some((d, k) => d !== first.shape[k]));
    if (odd >= 0) throw new GdrpcError(Code.INVALID_ARGUMENT, `${method}: handle ${odd} is not a ${first.dtype} [${first.shape.join(', ')}] tensor like the first; pull those apart`);
  } catch (error) {
    claims.unclaim();
    throw error;
  }
  return claims;
}

/** The handles one call claimed: spent together once its answer is over, or all given back. */
class Claims {
  readonly #claims: Claim[] = [];
  readonly tensors: Tensor[] = [];
  add(claim: Claim): void {
    this.#claims.push(claim);
    this.tensors.push(claim.tensor);
  }
  readonly spend = (): void => { for (const claim of this.#claims) claim.spend(); };
  unclaim(): void { for (const claim of this.#claims) claim.unclaim(); }
}

/** Gather staging one connection may hold at once (pullStacked and pullBlocks): a peer that asks
 *  for more in parallel is refused RESOURCE_EXHAUSTED rather than let grow GPU memory without
 *  bound. pullAll (4 lanes of up to 128 MiB) and pullBlocks (MAX_BLOCK_BYTES_IN_FLIGHT) stay
 *  under it. Staging is held until its bytes have left: a peer that never takes them holds
 *  it until its connection closes. */
export const OWNER_STAGING_BYTES_PER_CONNECTION = 512 << 20;
/** Gather staging one server holds at most, over all its connections. */
export const OWNER_STAGING_BYTES_PER_SERVER = 2 * 1024 ** 3;

/** The block indices of a pullBlocks call: `r` holds them as little-endian u32, each below `blocks`. */
function blockIndices(r: Uint8Array, blocks: number): Uint32Array {
  if (r.byteLength === 0 || r.byteLength % 4 !== 0) throw new GdrpcError(Code.INVALID_ARGUMENT, `pullBlocks: r must hold one or more little-endian u32 block indices, got ${r.byteLength} bytes`);
  if (r.byteLength / 4 > MAX_BLOCKS_PER_PULL) throw new GdrpcError(Code.INVALID_ARGUMENT, `pullBlocks gathers at most ${MAX_BLOCKS_PER_PULL} blocks a call, got ${r.byteLength / 4}; ask in parts`);
  const view = new DataView(r.buffer, r.byteOffset, r.byteLength);
  const indices = new Uint32Array(r.byteLength / 4);
  for (let k = 0; k < indices.length; k += 1) {
    const index = view.getUint32(k * 4, true);
    if (index >= blocks) throw new GdrpcError(Code.INVALID_ARGUMENT, `pullBlocks: block index ${index} (at ${k}) is outside the ${blocks} blocks of the tensor`);
    indices[k] = index;
  }
  return indices;
}

/** Gather staging of one server's pullStacked and pullBlocks calls, held per connection (its peer
 *  address), for OWNER_STAGING_BYTES_PER_CONNECTION, and by the whole server. */
class GatherStaging {
  readonly #staged = new Map<string, number>();
  #stagedTotal = 0;

  constructor(private readonly host: OwnerHost) {}

  /** Gathers `copies` (blocks of `blockBytes`) into a staging tensor of `shape` on `device`, which is
   *  freed once both the call is over (its bytes left, or never will) and the GPU is done writing it. */
  async gather(ctx: CallContext, device: Device, shape: number[], dtype: DType, blockBytes: number, copies: (stacked: Tensor) => BlockCopies, stillExposed: () => void): Promise<Tensor> {
    const held = this.#staged.get(ctx.peer) ?? 0;
    const bytes = shape.reduce((a, b) => a * b, elementSize(dtype));
    if (held + bytes > OWNER_STAGING_BYTES_PER_CONNECTION) {
      throw new GdrpcError(Code.RESOURCE_EXHAUSTED, `gathering ${bytes} more bytes would hold over ${OWNER_STAGING_BYTES_PER_CONNECTION} bytes of staging for this connection; wait for its other pulls`, { details: { retryable: true } });
    }
    if (this.#stagedTotal + bytes > OWNER_STAGING_BYTES_PER_SERVER) {
      throw new GdrpcError(Code.RESOURCE_EXHAUSTED, `gathering ${bytes} more bytes would hold over ${OWNER_STAGING_BYTES_PER_SERVER} bytes of staging on this server; try again later`, { details: { retryable: true } });
    }
    const stacked = this.host.staging(device).allocate(shape, dtype);
    this.#staged.set(ctx.peer, held + bytes);
    this.#stagedTotal += bytes;
    let copying = true;
    let over = false;
    const free = (): void => {
      stacked.release();
      this.#stagedTotal -= bytes;
      const left = (this.#staged.get(ctx.peer) ?? 0) - bytes;
      if (left > 0) this.#staged.set(ctx.peer, left);
      else this.#staged.delete(ctx.peer);
    };
    ctx.afterSend(() => {
      over = true;
      if (!copying) free();
    });
    try {
      // The handles' tensors were synchronized (or their producer waited for) when they were
      // exposed: no device-wide synchronize per gather, which would wait for other transfers.
      // A gather queued behind others checks that its handles are still exposed when its turn
      // comes: the call that exposed them may have ended meanwhile.
      await this.host.copyBlocks(blockBytes, copies(stacked), { sourcesReady: true, before: stillExposed });
    } finally {
      copying = false;
      if (over) free();
    }
    return stacked;
  }
}

/** gdrpc.Owner's methods for one server: its pulls, and the two that direct pulls ask. */
export function ownerMethods(host: OwnerHost): MethodEntry[] {
  const staging = new GatherStaging(host);
  return [...spendingPullMethods(host, staging), pullBlocksMethod(host, staging), ...directPullMethods(host)];
}

/** pull, pullMany and pullStacked: the pulls that spend their handles. */
function spendingPullMethods(host: OwnerHost, staging: GatherStaging): MethodEntry[] {
  // The answer's afterSend spends what the call claimed, whether its bytes left or never will.
  const pull = entry('pull', HANDLE_ARGS, (args: { x: number; s: Uint8Array }, ctx: CallContext) => {
    const claim = host.claim(args.x, args.s);
    ctx.afterSend(claim.spend);
    return { t: claim.tensor };
  }, (result) => pullResultFields(result.t as Tensor));

  const pullMany = entry('pullMany', PULL_MANY_ARGS, (args: { xs: number[]; ss: Uint8Array[] }, ctx: CallContext) => {
    const claims = claimAll(host, 'pullMany', args.xs, args.ss);
    ctx.afterSend(claims.spend);
    return { ts: claims.tensors };
  }, (result) => {
    const [field] = pullResultFields((result.ts as Tensor[])[0]!);
    return [{ name: 'ts', type: { kind: 'list', element: field!.type } }];
  });

  // The handles' tensors are gathered into one tensor on the first one's device (one kernel launch
  // when they are all on that GPU), which is sent as one message and freed once it has left.
  const pullStacked = entry('pullStacked', PULL_MANY_ARGS, async (args: { xs: number[]; ss: Uint8Array[] }, ctx: CallContext) => {
    const claims = claimAll(host, 'pullStacked', args.xs, args.ss);
    let stacked: Tensor;
    try {
      const first = claims.tensors[0]!;
      const bytes = first.byteLength;
      // A peer may call this by hand: the staging tensor is bounded by what pullAll would ask for.
      if (bytes > MAX_STACKED_BLOCK_BYTES) throw new GdrpcError(Code.INVALID_ARGUMENT, `pullStacked gathers handles of at most ${MAX_STACKED_BLOCK_BYTES} bytes, these hold ${bytes}; pull them with pullMany`);
      stacked = await staging.gather(ctx, first.device, [claims.tensors.length, ...first.shape], first.dtype, bytes,
        (dst) => claims.tensors.map((tensor, k) => ({ dst, dstOffset: k * bytes, src: tensor, srcOffset: 0 })),
        () => { for (const [k, x] of args.xs.entries()) host.lookup(x, args.ss[k]!); });
    } catch (error) {
      claims.unclaim();
      throw error;
    }
    ctx.afterSend(claims.spend);
    return { t: stacked };
  }, (result) => pullResultFields(result.t as Tensor));

  return [pull, pullMany, pullStacked];
}

/** pullBlocks, which gathers through the same staging as pullStacked. */
function pullBlocksMethod(host: OwnerHost, staging: GatherStaging): MethodEntry {
  // Blocks of one handle's tensor, picked by index (a block table over a KV pool): gathered in the
  // order asked into one [n, ...block] tensor, one message on the wire. The handle stays pullable:
  // a table is pulled in parts, and by more than one puller, until the call that exposed it ends.
  return entry('pullBlocks', PULL_BLOCKS_ARGS, async (args: { x: number; s: Uint8Array; b: number; r: Uint8Array }, ctx: CallContext) => {
    const tensor = host.lookup(args.x, args.s);
    const blockBytes = args.b;
    if (!blocksTile(tensor.dtype, tensor.byteLength, blockBytes)) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `pullBlocks: blocks of ${blockBytes} bytes do not tile the ${tensor.byteLength}-byte ${tensor.dtype} tensor`);
    }
    const indices = blockIndices(args.r, tensor.byteLength / blockBytes);
    if (indices.length * blockBytes > MAX_BLOCK_PULL_BYTES) {
      throw new GdrpcError(Code.INVALID_ARGUMENT, `pullBlocks gathers at most ${MAX_BLOCK_PULL_BYTES} bytes a call, ${indices.length} blocks of ${blockBytes} bytes are more; ask in parts`);
    }
    const stacked = await staging.gather(ctx, tensor.device, [indices.length, ...blockShapeOf(tensor.dtype, tensor.shape, blockBytes)], tensor.dtype, blockBytes,
      (dst) => ({ dst, src: tensor, srcBlocks: indices, count: indices.length }),
      () => { host.lookup(args.x, args.s); });
    return { t: stacked };
  }, (result) => pullResultFields(result.t as Tensor));
}

/** map and held, which a direct puller asks of the owner. */
function directPullMethods(host: OwnerHost): MethodEntry[] {
  // Direct pulls (remote/direct.ts): the CUDA IPC handle of the allocation an exposed GPU tensor
  // lies in, for servers that trust their admitted peers with it (it maps the whole allocation,
  // for as long as the peer keeps it mapped: docs/security.md); and whether a handle is still
  // exposed, which a direct puller asks once its copy is done.
  const map = entry('map', MAP_METHOD.args, (args: { x: number; s: Uint8Array }) => {
    if (!host.directPulls) throw new GdrpcError(Code.PERMISSION_DENIED, 'this server does not grant direct pulls (ServerOptions.directPulls)');
    const tensor = host.lookup(args.x, args.s);
    let exported: ReturnType<typeof exportAllocation>;
    try {
      exported = exportAllocation(tensor);
    } catch (error) {
      // A host tensor, or memory the driver will not export (not cuMemAlloc'd, or no IPC here):
      // the puller pulls two-sided, as for any other decline.
      throw new GdrpcError(Code.FAILED_PRECONDITION, `this tensor's memory cannot be mapped by another process: ${error instanceof Error ? error.message : String(error)}`);
    }
    return { h: exported.handle, o: exported.offset, n: exported.bytes, l: tensor.byteLength };
  }, () => MAP_METHOD.results);

  const held = entry('held', HELD_METHOD.args, (args: { x: number; s: Uint8Array }) => {
    host.lookup(args.x, args.s);
    return {};
  }, () => []);

  return [map, held];
}
