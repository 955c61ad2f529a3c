// Loaded in both processes of bench/call-split.ts (in the peer through NODE_OPTIONS): stamps every
// tag send and receive, the control path's tagSendNow, tagWatch and tagRecvInto included, with the
// machine's monotonic clock, which both processes share, while recording is on. Control frames
// (tagSendNow, tagWatch, tagRecvInto) are marked apart from tensor payloads (tagSend, tagRecv, tagRecvTaken). The peer toggles
// recording on SIGUSR2 and writes its stamps to $GDRPC_CALL_SPLIT_OUT.<pid> when it exits. A
// stamp costs a promise operation one promise hop; the control path's stamps cost no hop.
import { writeFileSync } from 'node:fs';
import { Endpoint } from '../core/ucx/endpoint.ts';
import { Worker } from '../core/ucx/worker.ts';

/** One tag operation: when it was posted and when its promise settled, in µs; `op` says whether it
 *  moved a control frame or a tensor's bytes (absent in stamps made before the two were told apart). */
export interface Stamp { kind: 'send' | 'recv'; op?: 'control' | 'data'; posted: number; settled: number }

export const stamps: Stamp[] = [];
let recording = false;

/** Starts recording afresh (on) or stops it. */
export function record(on: boolean): void {
  if (on) stamps.length = 0;
  recording = on;
}

/** The shared monotonic clock in µs. */
export function nowUs(): number {
  return Number(process.hrtime.bigint()) / 1e3;
}

function stamped(proto: object, name: string, kind: Stamp['kind']): void {
  // Every promise-returning operation wrapped here moves a tensor's bytes (the control path uses
  // tagSendNow, tagWatch and tagRecvInto, stamped below). The dispatcher's truncating receive of a message
  // it drops uses one too, but rejects, and only fulfilled operations are stamped.
  const original = (proto as Record<string, (...args: unknown[]) => unknown>)[name]!;
  Object.defineProperty(proto, name, {
    configurable: true,
    writable: true,
    value: function (this: unknown, ...args: unknown[]): unknown {
      if (!recording) return original.apply(this, args);
      const posted = nowUs();
      return Promise.resolve(original.apply(this, args)).then((value) => {
        stamps.push({ kind, op: 'data', posted, settled: nowUs() });
        return value;
      });
    },
  });
}

stamped(Worker.prototype, 'tagRecv', 'recv');
stamped(Worker.prototype, 'tagRecvTaken', 'recv');
stamped(Endpoint.prototype, 'tagSend', 'send');

// The control path's operations without a promise (core/ucx: tagSendNow answers undefined when
// UCX sent the message inside the call; tagWatch answers true when it took a message inside the
// call, else calls `taken` later, and the dispatcher receives the message at once, mostly inside
// that call; tagRecvInto, a turn's receive once reading falls behind, answers true when the
// message was received inside the call, else calls `done` later). A watch's stamp ends when it took
// the message.
const sendNow = Endpoint.prototype.tagSendNow;
Endpoint.prototype.tagSendNow = function (this: Endpoint, ...args: Parameters<Endpoint['tagSendNow']>) {
  if (!recording) return sendNow.apply(this, args);
  const posted = nowUs();
  const result = sendNow.apply(this, args);
  if (result === undefined) stamps.push({ kind: 'send', op: 'control', posted, settled: nowUs() });
  else void result.then(() => stamps.push({ kind: 'send', op: 'control', posted, settled: nowUs() }), () => {});
  return result;
};
const watch = Worker.prototype.tagWatch;
Worker.prototype.tagWatch = function (this: Worker, tag, mask, slot, taken) {
  if (!recording) return watch.call(this, tag, mask, slot, taken);
  const posted = nowUs();
  const now = watch.call(this, tag, mask, slot, () => {
    stamps.push({ kind: 'recv', op: 'control', posted, settled: nowUs() });
    taken();
  });
  if (now) stamps.push({ kind: 'recv', op: 'control', posted, settled: nowUs() });
  return now;
};
const recvInto = Worker.prototype.tagRecvInto;
Worker.prototype.tagRecvInto = function (this: Worker, dest, tag, mask, id, slot, done) {
  if (!recording) return recvInto.call(this, dest, tag, mask, id, slot, done);
  const posted = nowUs();
  const stampedDone = (error?: unknown): void => {
    if (error === undefined) stamps.push({ kind: 'recv', op: 'control', posted, settled: nowUs() });
    done(error);
  };
  const now = recvInto.call(this, dest, tag, mask, id, slot, stampedDone);
  if (now) stamps.push({ kind: 'recv', op: 'control', posted, settled: nowUs() });
  return now;
};

const out = process.env.GDRPC_CALL_SPLIT_OUT;
if (out !== undefined) {
  process.on('SIGUSR2', () => record(!recording));
  process.on('exit', () => writeFileSync(`${out}.${process.pid}`, JSON.stringify(stamps)));
}
