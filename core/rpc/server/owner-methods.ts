// The owner side of remote tensors, served by every Server under the reserved service
// gdrpc.Owner (docs/wire.md "Remote handle"): pull (one handle), pullMany (up to
// MAX_PULLS_PER_CALL handles of one dtype and shape, each its own tensor on the wire) and
// pullStacked (the same handles gathered into one [n, ...shape] tensor, one message on the wire).
// Every method is all or nothing: one unknown handle or wrong capability fails the call NOT_FOUND
// and leaves every handle of it pullable.
import { Code, GdrpcError } from '../../errors.ts';
import type { Device, Tensor, TensorPool } from '../../tensor/index.ts';
import type { BlockCopy } from '../../compute/blocks.ts';
import type { MethodDescriptor } from '../../schema/descriptor.ts';
import { fixedTensorType, MAX_PULLS_PER_CALL, MAX_STACKED_BLOCK_BYTES, OWNER_SERVICE, PULL_MANY_ARGS, pullResultFields } from '../remote/remote.ts';
import type { CallContext, MethodEntry } from './server-call.ts';

/** What the owner methods need from their server. */
export interface OwnerHost {
  /** The exposed tensor of handle `x`, if `secret` is its capability; `pulled` spends the handle. */
  lookup(x: number, secret: Uint8Array): { tensor: Tensor; pulled: () => void };
  /** Where pullStacked gathers its tensor on `device` (a mapped pool, so the send needs no registration). */
  staging(device: Device): TensorPool;
  /** The gather (the runtime's BlockCopier); `sourcesReady` as in BlockCopier.copy. */
  copyBlocks(blockBytes: number, copies: readonly BlockCopy[], options?: { sourcesReady?: boolean }): Promise<void>;
}

const PULL_ARGS: MethodDescriptor['args'] = [{ name: 'x', type: { kind: 'scalar', name: 'u32' } }, { name: 's', type: { kind: 'scalar', name: 'bytes' } }];

function entry(name: string, args: MethodDescriptor['args'], handler: MethodEntry['handler'], resultsOf: MethodEntry['resultsOf']): MethodEntry {
  return { method: { name, service: OWNER_SERVICE, clientStreaming: false, serverStreaming: false, args, results: [] }, types: {}, handler, resultsOf };
}

/** The handles of a pullMany or pullStacked call, looked up (nothing spent yet) and checked alike. */
function lookupAll(host: OwnerHost, method: string, xs: number[], ss: Uint8Array[]): Array<{ tensor: Tensor; pulled: () => void }> {
  if (xs.length !== ss.length) throw new GdrpcError(Code.INVALID_ARGUMENT, `${method}: ${xs.length} handles but ${ss.length} capabilities`);
  if (xs.length === 0 || xs.length > MAX_PULLS_PER_CALL) throw new GdrpcError(Code.INVALID_ARGUMENT, `${method} takes 1 to ${MAX_PULLS_PER_CALL} handles, got ${xs.length}`);
  const found = xs.map((x, i) => host.lookup(x, ss[i]!));
  const first = found[0]!.tensor;
  const odd = found.findIndex(({ tensor }) => tensor.dtype !== first.dtype || tensor.shape.length !== first.shape.length || tensor.shape.some((d, k) => d !== first.shape[k]));
  if (odd >= 0) throw new GdrpcError(Code.INVALID_ARGUMENT, `${method}: handle ${odd} is not a ${first.dtype} [${first.shape.join(', ')}] tensor like the first; pull those apart`);
  return found;
}

/** gdrpc.Owner/pull, pullMany and pullStacked for one server. */
export function ownerMethods(host: OwnerHost): MethodEntry[] {
  const pull = entry('pull', PULL_ARGS, (args: { x: number; s: Uint8Array }, ctx: CallContext) => {
    const { tensor, pulled } = host.lookup(args.x, args.s);
    ctx.afterSend(pulled);
    return { t: tensor };
  }, (result) => pullResultFields(result.t as Tensor));

  const pullMany = entry('pullMany', PULL_MANY_ARGS, (args: { xs: number[]; ss: Uint8Array[] }, ctx: CallContext) => {
    const found = lookupAll(host, 'pullMany', args.xs, args.ss);
    ctx.afterSend(() => { for (const { pulled } of found) pulled(); });
    return { ts: found.map(({ tensor }) => tensor) };
  }, (result) => {
    const [field] = pullResultFields((result.ts as Tensor[])[0]!);
    return [{ name: 'ts', type: { kind: 'list', element: field!.type } }];
  });

  // The handles' tensors are gathered into one tensor on the first one's device (one kernel launch
  // when they are all on that GPU), which is sent as one message and freed once it has left.
  const pullStacked = entry('pullStacked', PULL_MANY_ARGS, async (args: { xs: number[]; ss: Uint8Array[] }, ctx: CallContext) => {
    const found = lookupAll(host, 'pullStacked', args.xs, args.ss);
    const first = found[0]!.tensor;
    const bytes = first.byteLength;
    // A peer may call this by hand: the staging tensor is bounded by what pullAll would ask for.
    if (bytes > MAX_STACKED_BLOCK_BYTES) throw new GdrpcError(Code.INVALID_ARGUMENT, `pullStacked gathers handles of at most ${MAX_STACKED_BLOCK_BYTES} bytes, these hold ${bytes}; pull them with pullMany`);
    const stacked = host.staging(first.device).allocate([found.length, ...first.shape], first.dtype);
    // The call can end (deadline, cancel, lost connection) while the GPU still writes the staging
    // tensor: it goes back to its pool only once both the call is over and the copy is done.
    let copying = true;
    let over = false;
    ctx.afterSend(() => {
      over = true;
      if (!copying) stacked.release();
    });
    try {
      // Each handle's tensor was synchronized (or its producer waited for) when it was exposed:
      // no device-wide synchronize per batch, which would wait for the transfers of the others.
      await host.copyBlocks(bytes, found.map(({ tensor }, k) => ({ dst: stacked, dstOffset: k * bytes, src: tensor, srcOffset: 0 })), { sourcesReady: true });
    } finally {
      copying = false;
      if (over) stacked.release();
    }
    ctx.afterSend(() => { for (const { pulled } of found) pulled(); });
    return { t: stacked };
  }, (result) => {
    const t = result.t as Tensor;
    return [{ name: 't', type: fixedTensorType(t.dtype, t.shape, { kind: 'host' }) }];
  });

  return [pull, pullMany, pullStacked];
}
