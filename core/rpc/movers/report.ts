// What a transfer reports once its bytes moved (callInfo): the plan's path, corrected by UCX's
// description of the request that moved them. A sender's send is described in full, and so is an
// RMA reader's get; a tag receive says only its length and memory type, so the receiver predicts
// until the sender's report (a SENT frame) brings the sender's description (docs/gpu.md
// "Transfer paths").
import { Code, GdrpcError } from '../../errors.ts';
import type { ProtocolSeen, TransferInfo } from './mover.ts';
import type { TransferPlan } from './plan.ts';
import { parseProtocol, pathOfProtocol } from './protocol.ts';

/** The report of a transfer as planned, before UCX said anything. */
export function plannedInfo(argument: string, plan: TransferPlan): TransferInfo {
  const gdrpc = plan.mover === 'inline' || plan.staged !== undefined;
  return { argument, bytes: plan.bytes, mover: plan.mover, path: plan.path, source: gdrpc ? 'gdrpc' : 'predicted' };
}

/** Where readings of UCX descriptions are kept: a connection's TransferReports (a workload repeats
 *  a few descriptions, and reading one is regex work). */
export interface ProtocolReadings { reading<T>(report: string, read: (report: string) => T): T }

/** No keeping: each description is read as it comes. */
const READ_AFRESH: ProtocolReadings = { reading: (report, read) => read(report) };

/** Updates a sender's `infos` (one transfer's, or a gather's) with what UCX said of the send.
 *  Under noStaging a send that UCX moved through host memory throws: the bytes have moved, so the
 *  call fails. */
export function reportSent(infos: readonly TransferInfo[], plan: TransferPlan, seen: ProtocolSeen | void, noStaging: boolean, peer: string, readings: ProtocolReadings = READ_AFRESH): void {
  if (seen === undefined || seen.protocol === '') return;
  for (const info of infos) info.protocol = seen.protocol;
  const parsed = readings.reading(seen.protocol, parseProtocol);
  if (plan.staged !== undefined || parsed === undefined) return;
  const path = pathOfProtocol(parsed, plan.from, plan.to);
  if (path === undefined) return;
  for (const info of infos) {
    info.path = path;
    info.source = 'ucx';
  }
  if (noStaging && path === 'staged') {
    throw new GdrpcError(Code.FAILED_PRECONDITION, `${infos[0]!.argument}: UCX moved ${plan.from} -> ${plan.to} over ${peer} through host memory (noStaging): ${parsed.text}`, { path: 'staged' });
  }
}

/** What a receiver reports when the bytes are in: an RMA read from UCX's description of the get
 *  (the reader ran it); a tag receive predicted from the lanes and the memory types until the
 *  sender's report comes (applySenderReport). */
export function reportReceived(argument: string, plan: TransferPlan, seen: ProtocolSeen | void, readings: ProtocolReadings = READ_AFRESH): TransferInfo {
  const info = plannedInfo(argument, plan);
  if (plan.staged !== undefined || plan.mover === 'inline') return info;
  if (seen !== undefined && seen.protocol !== '') {
    info.protocol = seen.protocol;
    const parsed = readings.reading(seen.protocol, parseProtocol);
    const path = parsed === undefined ? undefined : pathOfProtocol(parsed, plan.to, plan.from);
    if (path !== undefined) {
      info.path = path;
      info.source = 'ucx';
    }
  }
  return info;
}

/** Completes a tag receiver's `info` with the sender's report of its send (undefined: none came).
 *  The sender's description names the memory UCX found at its end; this side's is the destination
 *  it allocated. A rendezvous the receiver pulled is described as UCX's estimate for a receiver with
 *  memory like the sender's: between unlike memory it maps to `staged` (pathOfProtocol). */
export function applySenderReport(info: TransferInfo, plan: TransferPlan, report: string | undefined, readings: ProtocolReadings = READ_AFRESH): void {
  if (report === undefined || report === '') return;
  info.protocol = report;
  if (plan.staged !== undefined) return;
  const parsed = readings.reading(report, parseProtocol);
  if (parsed === undefined) return;
  const from = parsed.memoryType === 'cuda' || parsed.memoryType === 'host' ? parsed.memoryType : plan.from;
  const path = pathOfProtocol(parsed, from, plan.to);
  if (path === undefined) return;
  info.path = path;
  info.source = 'sender';
}
