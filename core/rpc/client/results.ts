// A client call's result objects on their way in: decoded from the RESPONSE (or a stream item),
// validated against the method, and their tensors received into memory the client gives.
import { Code, GdrpcError } from '../../errors.ts';
import type { Tensor } from '../../tensor/index.ts';
import type { MethodDescriptor } from '../../schema/descriptor.ts';
import type { CallScope } from '../call/deadline.ts';
import { methodName } from '../call/method-name.ts';
import { ALLOCATE, type CallOptions } from '../call/options.ts';
import { validateFields } from '../call/validate.ts';
import { decodeFields, methodTypes, replaceDeep } from '../call/values.ts';
import type { OwnerDialer } from '../remote/owner-client.ts';
import type { TransferInfo, TransferScope } from '../movers/mover.ts';
import { IncomingTensors, PendingTensor, type Allocate } from '../transfer/transfer.ts';
import { refuseRaw } from '../transfer/refuse.ts';

type Row = Record<string, unknown>;

/** A result object received: its values, the transfers that brought its tensors, and their bytes. */
export interface Received { values: Row; transfers: TransferInfo[]; bytes: number }

/** Tensor bytes of a server stream's items received and not yet taken by the caller: each item's
 *  count against maxResultBytes with them, from when its frame is read (before anything is
 *  allocated) until the caller takes it. Counted per item alone, one stream call held 64 items of
 *  maxResultBytes each (a helper session's server sent 64 items of 64 MiB: 4 GiB received before
 *  the caller took one, 2026-12-06). */
export interface HeldItems { bytes: number }

/** Where a client's results land: how remote handles in them are pulled, and the memory their
 *  tensors are received into (a call's ALLOCATE option takes its place). */
export interface ResultLanding { maxTensor(): number; maxTotal(): number; dialOwner(): OwnerDialer; allocate: Allocate }

/** Decodes a result object, validates it, receives its tensors: at once when it carries no
 *  tensor bytes (the small call makes no promise here), else once they arrived. Failures always
 *  come as a rejected promise, never thrown. `held`: a server stream's count, which the item's
 *  bytes join (the caller takes them off as it takes the item; a failure gives them back). */
export function receiveResults(call: TransferScope, method: MethodDescriptor, wire: Row, scope: CallScope, options: CallOptions, landing: ResultLanding, held?: HeldItems): Received | Promise<Received> {
  try {
    return decodeResults(call, method, wire, scope, options, landing, held);
  } catch (error) {
    return Promise.reject(error);
  }
}

function decodeResults(call: TransferScope, method: MethodDescriptor, wire: Row, scope: CallScope, options: CallOptions, landing: ResultLanding, held: HeldItems | undefined): Received | Promise<Received> {
  const incoming = new IncomingTensors(call, { maxTensor: landing.maxTensor(), maxTotal: landing.maxTotal(), held: held?.bytes ?? 0, noStaging: options.noStaging ?? false },
    { side: 'client', label: `${methodName(method)} results.`, dialOwner: landing.dialOwner() });
  const types = methodTypes(method);
  let values: Row;
  try {
    values = decodeFields(method.results, wire, types, incoming.decode, '');
    validateFields(method.results, values, types, `${methodName(method)} results`);
    incoming.checkDecoded();
  } catch (error) {
    // noStaging's refusal and results over ClientOptions.maxTensorBytes or maxResultBytes are this side's limits,
    // told as they are; anything else is the server's fault.
    const failure = error instanceof GdrpcError && (error.code === Code.FAILED_PRECONDITION || error.code === Code.RESOURCE_EXHAUSTED) ? error
      : new GdrpcError(Code.INTERNAL, `server ${call.connection.peer} sent bad results: ${GdrpcError.from(error).rawMessage}`, { cause: error });
    // The refusal settles in the background: waiting for it held the call past its deadline and
    // signal until transferTimeoutMs when the peer never sent the refused bytes (30 s; a helper
    // session's owner, 2026-12-06).
    void refuseRaw(call, wire);
    return Promise.reject(failure);
  }
  // No tensor bytes to wait for (none, or only remote handles): the common small call.
  if (!incoming.hasBytes) {
    scope.throwIfPastDeadline();
    return { values, transfers: incoming.transfers, bytes: 0 };
  }
  const receiving = receiveBytes(incoming, values, scope, options[ALLOCATE] ?? landing.allocate, options.noStaging === true);
  if (held === undefined) return receiving;
  const bytes = incoming.bytes;
  held.bytes += bytes;
  return receiving.catch((error: unknown) => {
    held.bytes -= bytes;
    throw error;
  });
}

async function receiveBytes(incoming: IncomingTensors, values: Row, scope: CallScope, allocate: Allocate, noStaging: boolean): Promise<Received> {
  const receiving = incoming.receive(allocate);
  let received: Map<PendingTensor, Tensor>;
  try {
    received = await scope.race(receiving);
  } catch (error) {
    // The bytes keep arriving after an abort: give their memory back once they have.
    receiving.then(() => incoming.releaseAll(), () => {});
    throw error;
  }
  // noStaging holds the results until the server's reports say how UCX moved them.
  if (noStaging) {
    try {
      await scope.race(incoming.confirm());
    } catch (error) {
      incoming.releaseAll();
      throw error;
    }
  }
  replaceDeep(values, (item) => (item instanceof PendingTensor ? received.get(item) ?? item : item));
  return { values, transfers: incoming.transfers, bytes: incoming.bytes };
}
