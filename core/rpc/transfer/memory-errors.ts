// RESOURCE_EXHAUSTED for memory, in one shape wherever it is raised: the message says whose memory
// (client or server), which pool or limit, which tensor, and which option to change; the details
// carry the same as data ({ side, requested, capacity, options, retryable, ... }). A bare "tensor
// pool on cpu is exhausted" left users raising maxTensorBytes when the pool was the limit.
import { Code, GdrpcError } from '../../errors.ts';
import { HOLD_MS, type DropReason } from '../connection/held-payloads.ts';

/** Whose memory or limit it is. */
export type Side = 'client' | 'server';

/** The server's settings that decide whether an argument tensor fits. */
export interface ServerMemorySettings { poolBytes: number; poolWaitMs: number; maxTensorBytes: number }

/** "268435456 bytes (256 MiB)": exact for the options, readable for people. */
export function sizeText(bytes: number): string {
  if (bytes < 1024) return `${bytes} bytes`;
  const [value, unit] = bytes >= 1 << 30 ? [bytes / (1 << 30), 'GiB'] : bytes >= 1 << 20 ? [bytes / (1 << 20), 'MiB'] : [bytes / 1024, 'KiB'];
  return `${bytes} bytes (${Number.isInteger(value) ? value : value.toFixed(1)} ${unit})`;
}

/** A tensor over a maxTensorBytes limit (`side` is whose limit; the client checks the server's
 *  before sending). */
export function tensorTooLarge(side: Side, field: string, requested: number, limit: number): GdrpcError {
  const option = side === 'server' ? 'ServerOptions.maxTensorBytes' : 'ClientOptions.maxTensorBytes';
  return new GdrpcError(Code.RESOURCE_EXHAUSTED,
    `${field}: a tensor of ${sizeText(requested)} exceeds the ${side}'s limit of ${sizeText(limit)} (${option})`,
    { details: { side, requested, capacity: limit, limit: 'maxTensorBytes', options: ['maxTensorBytes'], retryable: false } });
}

/** A tensor whose payload came before its frame was read and was dropped, `why`: this side's
 *  runtime held more than maxHeldPayloadBytes of such payloads, or it waited HOLD_MS for its frame
 *  (this side was behind on its control messages either way). Retryable where the call never ran
 *  (a server's arguments), as a busy pool is; `ran`: a client stream's item, or a result. */
export function heldPayloadDropped(side: Side, field: string, requested: number, why: DropReason, limit: number, ran: boolean): GdrpcError {
  const because = why === 'weight'
    ? `the ${side}'s connections held more than ${sizeText(limit)} of such bytes (RuntimeOptions.maxHeldPayloadBytes)`
    : `the ${side} did not read their frame within ${HOLD_MS} ms of their coming`;
  return new GdrpcError(Code.RESOURCE_EXHAUSTED,
    `${field}: its ${sizeText(requested)} of tensor bytes came before their frame was read and were dropped: ${because}, as a ${side} behind on its messages does; ${!ran ? 'the call never ran, try again' : side === 'server' ? 'the call ran, its stream is cut' : 'the call ran and its result is lost'}`,
    { details: { side, requested, capacity: limit, limit: 'maxHeldPayloadBytes', options: ['maxHeldPayloadBytes'], retryable: !ran } });
}

/** A server stream's item whose tensors, with those of the items received and not yet taken by
 *  the caller (`held`), come to more than ClientOptions.maxResultBytes; `requested` is the item's
 *  total up to the tensor that passed it. */
export function streamItemsTooLarge(field: string, held: number, requested: number, limit: number): GdrpcError {
  return new GdrpcError(Code.RESOURCE_EXHAUSTED,
    `${field}: the stream item's tensors come to ${sizeText(requested)} or more, and the items received and not yet taken hold ${sizeText(held)}: past the client's limit of ${sizeText(limit)} (ClientOptions.maxResultBytes), counted across a stream's items until the caller takes them`,
    { details: { side: 'client', requested: held + requested, capacity: limit, limit: 'maxResultBytes', options: ['maxResultBytes'], retryable: false } });
}

/** A client's result object (a RESPONSE or a stream item) announcing more tensor bytes in all than
 *  ClientOptions.maxResultBytes; `requested` is the total up to the tensor that passed it. */
export function resultsTooLarge(field: string, requested: number, limit: number): GdrpcError {
  return new GdrpcError(Code.RESOURCE_EXHAUSTED,
    `${field}: the result's tensors come to ${sizeText(requested)} or more, past the client's limit of ${sizeText(limit)} for one result (ClientOptions.maxResultBytes)`,
    { details: { side: 'client', requested, capacity: limit, limit: 'maxResultBytes', options: ['maxResultBytes'], retryable: false } });
}

/** An argument tensor the server could not allocate, reworded from the pool's error. */
export function serverAllocationFailed(error: unknown, field: string, settings: ServerMemorySettings): unknown {
  if (!(error instanceof GdrpcError) || error.code !== Code.RESOURCE_EXHAUSTED) return error;
  const pool = poolFigures(error);
  if (pool === undefined) return plainAllocationFailed('server', error, field);
  const where = `server tensor pool on ${pool.device}`;
  if (pool.requested > pool.capacity) {
    const admits = settings.maxTensorBytes >= pool.requested ? ` (maxTensorBytes ${settings.maxTensorBytes} admits the tensor: the pool is the limit)` : '';
    return new GdrpcError(Code.RESOURCE_EXHAUSTED,
      `${where}: ${field} can never fit: ${sizeText(pool.requested)} requested, pool capacity ${sizeText(pool.capacity)}; ` +
      `raise ServerOptions.poolBytes (${settings.poolBytes}), or set allowPoolOverflow: true${admits}`,
      { details: { ...pool, side: 'server', options: ['poolBytes', 'allowPoolOverflow'], retryable: false } });
  }
  if (pool.queueLimit !== undefined) {
    return new GdrpcError(Code.RESOURCE_EXHAUSTED,
      `${where} is busy: ${field} (${sizeText(pool.requested)}) would wait behind ${sizeText(pool.queuedBytes ?? 0)} in ${pool.queued ?? 0} tensor(s) already waiting ` +
      `(ServerOptions.poolQueueBytes ${pool.queueLimit}); refused at once, it never ran. Retry later, or raise ServerOptions.poolBytes or poolQueueBytes`,
      { details: { ...pool, side: 'server', options: ['poolBytes', 'poolQueueBytes'], retryable: true } });
  }
  return new GdrpcError(Code.RESOURCE_EXHAUSTED,
    `${where} is exhausted: ${field} waited ${pool.waitedMs ?? 0} ms (ServerOptions.poolWaitMs ${settings.poolWaitMs}) for ${sizeText(pool.requested)}; ` +
    `${pool.capacity - pool.used} of ${pool.capacity} bytes free, largest free block ${pool.largestFree}: other calls hold the rest. ` +
    'Raise ServerOptions.poolBytes or poolWaitMs, set allowPoolOverflow: true, or retry later',
    { details: { ...pool, side: 'server', options: ['poolBytes', 'poolWaitMs', 'allowPoolOverflow'], retryable: true } });
}

/** A result tensor the client could not allocate (its process pool, created without overflow). */
export function clientAllocationFailed(error: unknown, field: string): unknown {
  if (!(error instanceof GdrpcError) || error.code !== Code.RESOURCE_EXHAUSTED) return error;
  const pool = poolFigures(error);
  if (pool === undefined) return plainAllocationFailed('client', error, field);
  const neverFits = pool.requested > pool.capacity;
  return new GdrpcError(Code.RESOURCE_EXHAUSTED,
    `client tensor pool on ${pool.device} (the process pool results are received into) ${neverFits ? 'can never fit' : 'has no room for'} ${field}: ` +
    `${sizeText(pool.requested)} requested, ${pool.capacity - pool.used} of ${pool.capacity} bytes free, largest free block ${pool.largestFree}. ` +
    `It was made by processPool with allowOverflow: false: raise ClientOptions.poolBytes (a larger pool, with overflow), leave allowOverflow at its default${neverFits ? '' : ', or release result tensors you no longer need'}`,
    { details: { ...pool, side: 'client', options: ['poolBytes', 'allowOverflow'], retryable: !neverFits } });
}

interface PoolFigures {
  device: string; requested: number; capacity: number; used: number; largestFree: number; waitedMs?: number;
  /** A full wait queue: its limit, and what already waits. */
  queueLimit?: number; queuedBytes?: number; queued?: number;
}

/** The figures a TensorPool puts in its RESOURCE_EXHAUSTED details, if these are a pool's. */
function poolFigures(error: GdrpcError): PoolFigures | undefined {
  const d = error.details;
  if (typeof d?.device !== 'string' || typeof d.requested !== 'number' || typeof d.capacity !== 'number') return undefined;
  return {
    device: d.device, requested: d.requested, capacity: d.capacity, used: Number(d.used ?? 0), largestFree: Number(d.largestFree ?? 0),
    ...(typeof d.waitedMs === 'number' ? { waitedMs: d.waitedMs } : {}),
    ...(typeof d.queueLimit === 'number' ? { queueLimit: d.queueLimit, queuedBytes: Number(d.queuedBytes ?? 0), queued: Number(d.queued ?? 0) } : {}),
  };
}

/** Host or device memory itself ran out (poolBytes 0, or an overflow allocation). */
function plainAllocationFailed(side: Side, error: GdrpcError, field: string): GdrpcError {
  return new GdrpcError(Code.RESOURCE_EXHAUSTED, `${side}: ${error.rawMessage} for ${field}`,
    { cause: error, details: { ...error.details, side, retryable: true } });
}
