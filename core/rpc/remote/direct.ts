// Direct block-table pulls (RemoteTensor.pullBlocks with `direct`): an owner that trusts its
// peers (ServerOptions.directPulls) hands out the CUDA IPC handle of the allocation an exposed
// GPU tensor lies in (gdrpc.Owner/map); the puller maps it and one kernel launch of its own copies
// every block straight from the owner's memory to its places, with no staging on either side and
// no message per part. Afterwards it asks the owner whether the handle is still exposed
// (gdrpc.Owner/held): bytes read after the exposure ended may be another request's, so the pull
// fails NOT_FOUND then, as a two-sided pull would. docs/gpu.md "Direct pulls" and docs/security.md
// say what a peer granted this can do.
import { Code, GdrpcError } from '../../errors.ts';
import { IPC_HANDLE_BYTES, mapAllocation, type Mapping } from '../../compute/ipc.ts';
import { checkShape } from '../../tensor/shape.ts';
import { Storage } from '../../tensor/storage.ts';
import { Tensor, type Device, type TensorPoolLike } from '../../tensor/index.ts';
import type { MethodDescriptor } from '../../schema/descriptor.ts';
import { attachCallInfo } from '../movers/call-info.ts';
import { HANDLE_ARGS, isUnknownMethod, OWNER_SERVICE, type DirectGrant, type OwnerClient, type OwnerConnection } from './owner-client.ts';
import type { BlockPull } from './block-table.ts';

/** gdrpc.Owner/map: the IPC handle `h` of the allocation the handle's tensor lies in, the
 *  tensor's offset `o` in it, the allocation's size `n` and the tensor's length `l` as the owner
 *  knows it (the handle's descriptor is whoever sent it's word). */
export const MAP_METHOD: MethodDescriptor = {
  name: 'map', service: OWNER_SERVICE, clientStreaming: false, serverStreaming: false, args: HANDLE_ARGS,
  results: [
    { name: 'h', type: { kind: 'scalar', name: 'bytes' } }, { name: 'o', type: { kind: 'scalar', name: 'f64' } },
    { name: 'n', type: { kind: 'scalar', name: 'f64' } }, { name: 'l', type: { kind: 'scalar', name: 'f64' } },
  ],
};

/** gdrpc.Owner/held: answers when the handle is still exposed, NOT_FOUND when not. */
export const HELD_METHOD: MethodDescriptor = {
  name: 'held', service: OWNER_SERVICE, clientStreaming: false, serverStreaming: false, args: HANDLE_ARGS, results: [],
};

/** Whether an owner's refusal of gdrpc.Owner/map means "pull the two-sided way": it does not
 *  grant direct pulls, the tensor is in host memory, or it predates the method. */
function declined(error: unknown): boolean {
  if (!(error instanceof GdrpcError)) return false;
  return error.code === Code.PERMISSION_DENIED || error.code === Code.FAILED_PRECONDITION || isUnknownMethod(error);
}

function malformed(what: string): GdrpcError {
  return new GdrpcError(Code.INTERNAL, `RemoteTensor.pullBlocks: the owner answered gdrpc.Owner/map with ${what}`);
}

/** Runs `plan` directly when the owner grants it and its allocation can be mapped here; resolves
 *  to undefined when not (the caller pulls two-sided), to the tensor the blocks are in otherwise. */
export async function runDirectPull(client: OwnerClient, plan: BlockPull, via: OwnerConnection | undefined): Promise<Tensor | undefined> {
  if (plan.device === 'cpu' || via?.directDeclined === true) return undefined;
  const device = Number(plan.device.slice('cuda:'.length));
  const { source, blockBytes, indices, at, into } = plan;
  const started = performance.now();
  const handle = { x: source.wire.x!, s: source.wire.s! };
  // Over a shared connection the owner's answer for this handle is kept: a handle pulled again
  // skips the question (held, below, still checks the exposure after every copy).
  const grantKey = `${handle.x}/${Buffer.from(handle.s).toString('hex')}`;
  let grant = via?.grantOf(grantKey);
  if (grant === undefined) {
    try {
      grant = grantOf(await client.unary(MAP_METHOD, handle, undefined, plan.limits));
    } catch (error) {
      if (!declined(error)) throw error;
      // Not granted by this owner (or an owner that predates it): ask no more over this
      // connection. A host tensor is declined for itself only.
      if ((error as GdrpcError).code !== Code.FAILED_PRECONDITION) via?.declineDirect();
      return undefined;
    }
  }
  // The descriptor the handle came with is whoever sent it's word; the owner's length is what
  // bounds the reads (a forwarded handle may claim a larger tensor than the capability covers).
  if (grant.byteLength !== source.byteLength) {
    via?.keepGrant(grantKey, undefined);
    throw new GdrpcError(Code.INVALID_ARGUMENT, `RemoteTensor.pullBlocks: the handle describes a ${source.byteLength}-byte tensor, its owner holds ${grant.byteLength} bytes under it`);
  }
  const { handle: h, offset: o } = grant;
  const lease = leaseMapping(via, device, h);
  if (lease === undefined) return undefined;
  const made = into === undefined;
  let target: Tensor | undefined;
  let gone = false;
  try {
    const src = ownerTensor(source, lease.mapping, o, plan.device);
    target = into ?? (plan.pool !== undefined ? plan.pool.allocate([indices.length, ...plan.blockShape], source.dtype) : Tensor.empty([indices.length, ...plan.blockShape], source.dtype, { device: plan.device }));
    const dst = target;
    // The owner synchronized the tensor when it exposed it (sourcesReady).
    await client.copyBlocks(blockBytes, { dst, dstBlocks: at, src, srcBlocks: indices, count: indices.length }, { sourcesReady: true });
    await client.unary(HELD_METHOD, handle, undefined, plan.limits);
    via?.keepGrant(grantKey, grant);
  } catch (error) {
    if (made) target?.release();
    via?.keepGrant(grantKey, undefined);
    // The handle is gone: its allocation may be freed soon, so a kept mapping of it goes too.
    gone = error instanceof GdrpcError && error.code === Code.NOT_FOUND;
    throw error;
  } finally {
    lease.release(gone);
  }
  const bytes = indices.length * blockBytes;
  return attachCallInfo(target, {
    transfers: [{ argument: 'blocks', bytes, mover: 'rma', path: 'cuda_ipc', source: 'gdrpc', protocol: `gdrpc direct: ${indices.length} blocks of ${blockBytes} bytes read by one kernel on cuda:${device} through a CUDA IPC mapping of the owner's allocation` }],
    durationMs: performance.now() - started,
  });
}

/** The owner's answer to gdrpc.Owner/map, checked before anything is mapped. */
function grantOf(answer: Record<string, unknown>): DirectGrant {
  const { h, o, l } = answer;
  if (!(h instanceof Uint8Array) || h.byteLength !== IPC_HANDLE_BYTES) throw malformed(`a handle that is not ${IPC_HANDLE_BYTES} bytes`);
  if (typeof o !== 'number' || !Number.isSafeInteger(o) || o < 0) throw malformed(`an offset that is not a byte count (${String(o)})`);
  if (typeof l !== 'number' || !Number.isSafeInteger(l) || l < 0) throw malformed(`a tensor length that is not a byte count (${String(l)})`);
  return { handle: h, offset: o, byteLength: l };
}

/** A mapping of the owner's allocation as a pull holds it, and what lets it go (`forget`: unmap it
 *  once unused, as after the owner said the handle is gone). */
type MappingLease = { mapping: Mapping; release: (forget?: boolean) => void };

/** The owner's allocation `h` mapped on cuda:`device`, shared through `via` when given; undefined
 *  when it cannot be mapped here, after which `via` pulls two-sided at once. */
function leaseMapping(via: OwnerConnection | undefined, device: number, h: Uint8Array): MappingLease | undefined {
  try {
    return via !== undefined ? via.useMapping(`${device}/${Buffer.from(h).toString('hex')}`, () => mapAllocation(device, h)) : own(mapAllocation(device, h));
  } catch (error) {
    // Not mappable here (an owner on another node or in this process): two-sided it is.
    if (error instanceof GdrpcError && (error.details?.cudaError !== undefined || error.code === Code.FAILED_PRECONDITION)) {
      via?.declineDirect();
      return undefined;
    }
    throw error;
  }
}

/** A mapping of a pull's own (no shared connection): unmapped when the pull lets go. */
function own(mapping: Mapping): MappingLease {
  return { mapping, release: () => mapping.close() };
}

/** The handle's tensor where the owner says it lies in `mapping`, at offset `o`, read in place. */
function ownerTensor(source: BlockPull['source'], mapping: Mapping, o: number, device: Device): Tensor {
  // The owner's word for where its tensor is, checked against what the driver mapped here: the
  // kernel reads only inside the mapping.
  if (o + source.byteLength > mapping.bytes) {
    throw malformed(`its ${source.byteLength}-byte tensor at offset ${o} of a ${mapping.bytes}-byte allocation`);
  }
  const shape = checkShape([...source.shape], source.dtype);
  return new Tensor(source.dtype, shape, new Storage<TensorPoolLike>({ device, byteLength: source.byteLength, address: mapping.address + BigInt(o) }));
}
