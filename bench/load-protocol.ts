// Messages between bench/load.ts and its peer processes (bench/load-server.ts, bench/load-client.ts),
// sent over Node's IPC channel.
import type { HistogramData } from './load-histogram.ts';

/** What one client process does: `connections` clients, `inflight` calls each, in each run. */
export interface ClientPlan {
  port: number;
  connections: number;
  inflight: number;
  /** Share of calls (0..1) that carry a host tensor of a random size in [minTensorBytes, maxTensorBytes]. */
  tensorShare: number;
  minTensorBytes: number;
  maxTensorBytes: number;
  deadlineMs: number;
}

/** Outcomes of one kind of call (small or tensor) in one client process. */
export interface CallTally {
  ok: number;
  /** Successful calls that ended inside the load window (the rate counts these). */
  okInWindow: number;
  /** Tensor bytes of the calls in okInWindow. */
  bytesInWindow: number;
  errors: Record<string, number>;
  /** Latency of every call, whatever its outcome (ms). */
  all: HistogramData;
  /** Latency of the calls that succeeded (ms). */
  okLatency: HistogramData;
}

/** What a client process sends back once the calls of a run have all settled. */
export interface ClientReport {
  small: CallTally;
  tensor: CallTally;
  /** 'disconnect' and 'error' events of its clients since they connected (warm-up included). */
  disconnects: number;
  /** The first few distinct reasons its clients were given for a disconnect. */
  disconnectReasons: string[];
  clientErrors: number;
  /** Longest lateness of a 10 ms timer during the load and its drain (ms). */
  maxStallMs: number;
  /** From the end of the load window until the last call settled (ms). */
  drainMs: number;
  /** A few error messages per code, for reading what went wrong. */
  /** Errors by code, then by kind (messageKind): how many, and the first message of the kind. */
  examples: Record<string, Record<string, KindCount>>;
}

/** What the server process reports when asked. */
export interface ServerSnapshot {
  rssBytes: number;
  /** V8's heap (total, used) and memory outside it (external): which part of RSS moved. */
  heapTotalBytes: number;
  heapUsedBytes: number;
  externalBytes: number;
  activeCalls: number;
  connectionCount: number;
  disconnects: number;
  /** The server's reasons for closing connections, one example of each kind (messages with their
   *  numbers masked), with how many it closed for it. */
  disconnectKinds: Record<string, KindCount>;
  errors: number;
  maxStallMs: number;
  /** RSS once a second since the server started: [epoch ms, bytes]. */
  rss: Array<[number, number]>;
}

export type ToClient = { kind: 'run'; seconds: number } | { kind: 'close' };
export type FromClient = { kind: 'report'; report: ClientReport } | { kind: 'failed'; message: string };
export type ToServer = { kind: 'snapshot'; resetStall?: boolean } | { kind: 'close' };
export type FromServer = { kind: 'snapshot'; snapshot: ServerSnapshot };

/** How many messages of a kind, and the first of them. */
export interface KindCount { count: number; example: string }

/** A message with its numbers masked: messages that differ only in sizes, ids or ports are one kind. */
export function messageKind(message: string): string {
  return message.replace(/\d[\d.,]*/g, 'N');
}

/** Counts `message` under its kind in `kinds`. */
export function countKind(kinds: Record<string, KindCount>, message: string): void {
  (kinds[messageKind(message)] ??= { count: 0, example: message }).count += 1;
}
