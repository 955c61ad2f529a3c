// The typed UCX binding (contract: docs/binding.md).
import { native } from '../native.ts';
import { invalid } from './check.ts';
import type { NativeStats } from './native-types.ts';

export { Context, type ContextOptions, type MemoryType, type Feature } from './context.ts';
export { Worker, type WorkerOptions, type TagOptions, type TagRecvResult, type ProtocolReport, type TakenMessage, type WorkerStats, type WakeupKind, type TcpPort, isPeerPrefixList, PEER_PREFIXES_EXPECTED } from './worker.ts';
export { Listener, type ListenerOptions } from './listener.ts';
export { Endpoint, RemoteKey, portOf } from './endpoint.ts';
export { MemoryRegion, isMemorySpan, type MemorySpan, type TagBuffer } from './memory.ts';
export { UCX_DEFAULTS } from '../native.ts';

/** Process-wide counters (for leak tests): live native objects of each kind. */
export function nativeStats(): NativeStats {
  return native().nativeStats();
}

/** A clock of the calling thread's own time in ms: wall time less the time the thread waited for
 *  a CPU (Linux schedstat's run-queue wait), so that it counts what the thread ran and what it
 *  was blocked in, but not what other processes ran meanwhile. Where schedstat cannot be read,
 *  the thread's CPU time (which leaves out blocking too); where neither can, wall time. Own time
 *  can step back by a few ms (the kernel adds a wait when the thread runs again): take deltas
 *  with a floor. */
export function ownTimeClock(): () => number {
  const binding = native();
  if (binding.threadOwnMs() >= 0) return () => binding.threadOwnMs();
  if (binding.threadCpuMs() >= 0) return () => binding.threadCpuMs();
  return () => performance.now();
}

/** Marks close-on-exec the sockets, epoll and event descriptors UCX opened without it, so that
 *  programs this process starts do not inherit them (a child kept its parent's listening port):
 *  every descriptor above stderr with one close_range where the kernel has it (returns -1), else
 *  the sockets and anonymous inodes that lack the flag (returns how many it marked). Workers and
 *  listeners do it as they are made; the runtime, as a server takes a connection and once its
 *  HELLO is sent (before admission), and as each connection is admitted (its lanes' sockets
 *  exist by then). */
export function closeUcxDescriptorsOnExec(): number {
  return native().closeOnExec();
}

/** Address of the first byte of a host view (for descriptors and CUDA copies). */
export function addressOf(view: ArrayBufferView | ArrayBuffer): bigint {
  if (!ArrayBuffer.isView(view) && !(view instanceof ArrayBuffer)) throw invalid('addressOf expects an ArrayBufferView or an ArrayBuffer');
  return native().addressOf(view);
}
