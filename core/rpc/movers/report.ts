// What a transfer reports once its bytes moved (callInfo): the plan's path, corrected by UCX's
// description of this side's request where there is one. A sender's send is described in full; a
// receive says only its length and memory type, so the receiver maps what it can and predicts the
// rest from the lanes (docs/gpu.md "Transfer paths").
import { Code, GdrpcError } from '../../errors.ts';
import type { Endpoint } from '../../ucx/index.ts';
import type { ProtocolSeen, TransferInfo } from './mover.ts';
import { transferPath } from './path.ts';
import type { TransferPlan } from './plan.ts';
import { parseProtocol, pathOfProtocol } from './protocol.ts';

/** Updates a sender's `info` with what UCX said of its send. Under noStaging a send that UCX moved
 *  through host memory throws: the bytes have moved, so the call fails. */
export function reportSent(info: TransferInfo, plan: TransferPlan, seen: ProtocolSeen | void, noStaging: boolean, peer: string): void {
  if (seen === undefined || seen.protocol === '') return;
  info.protocol = seen.protocol;
  const parsed = parseProtocol(seen.protocol);
  if (plan.staged !== undefined || parsed === undefined) return;
  info.path = pathOfProtocol(parsed, plan.from, plan.to) ?? info.path;
  if (noStaging && info.path === 'staged') {
    throw new GdrpcError(Code.FAILED_PRECONDITION, `${info.argument}: UCX moved ${plan.from} -> ${plan.to} over ${peer} through host memory (noStaging): ${parsed.text}`, { path: 'staged' });
  }
}

/** What a receiver reports: RMA reads from UCX's description of the get (the reader ran it); tag
 *  receives from the lanes and the memory types, this side's as UCX detected it. */
export function reportReceived(argument: string, plan: TransferPlan, seen: ProtocolSeen | void, endpoint: Endpoint): TransferInfo {
  const info: TransferInfo = { argument, bytes: plan.bytes, mover: plan.mover, path: 'staged' };
  const parsed = seen === undefined || seen.protocol === '' ? undefined : parseProtocol(seen.protocol);
  if (seen !== undefined && seen.protocol !== '') info.protocol = seen.protocol;
  if (plan.staged !== undefined) return info;
  const detected = parsed?.memoryType;
  const to = detected === 'host' || detected === 'cuda' ? detected : plan.to;
  info.path = (parsed !== undefined ? pathOfProtocol(parsed, to, plan.from) : undefined)
    ?? transferPath(plan.mover, endpoint, plan.from, to, plan.bytes);
  return info;
}
