// The shape of the native addon as the TypeScript layer sees it. The addon trusts its arguments:
// every call here is made by core/ucx after validation.
import type { GdrpcError } from '../errors.ts';

export type NativeTarget = ArrayBufferView | ArrayBuffer | NativeMemoryRegion;
export interface NativeTransport { transport: string; device: string }
export interface NativeProtocolReport { protocol: string; initialProtocol: string }
export interface NativeRecvResult extends Partial<NativeProtocolReport> { senderTag: bigint; length: number }

export interface NativeContext {
  libraryPath(): string | undefined;
  transports(): NativeTransport[];
  memoryTypes(): string[];
  close(): void;
}
export interface NativeWorker {
  tagRecv(target: NativeTarget, offset: number, length: number, tag: bigint, mask: bigint, id: number, completed?: () => void, describe?: boolean): Promise<NativeRecvResult>;
  tagRecvInto(target: NativeTarget, offset: number, length: number, tag: bigint, mask: bigint, id: number, slot: Uint32Array, callback: (error?: unknown) => void): boolean;
  tagProbe(tag: bigint, mask: bigint, remove: boolean, queueOnly?: boolean): (NativeRecvResult & { taken: number }) | null;
  tagRecvTaken(taken: number, target: NativeTarget, offset: number, length: number, id: number, completed?: () => void, describe?: boolean): Promise<NativeRecvResult>;
  tagRecvTakenInto(taken: number, target: NativeTarget, offset: number, length: number, id: number, slot: Uint32Array, callback: (error?: unknown) => void): boolean;
  tagWatch(tag: bigint, mask: bigint, slot: Uint32Array, callback: () => void): boolean;
  tagUnwatch(): boolean;
  sweep(on: boolean): void;
  sweepKnown(controlTag: bigint, dataWord: number, known: boolean): void;
  sweepHold(controlTag: bigint, capBytes: number, perMessage: number): void;
  sweepHeld(controlTag: bigint): HeldLine;
  progress(): boolean;
  cancel(id: number): void;
  activity(): number;
  stats(): WorkerStats;
  ports(): TcpPort[];
  close(): void;
}
export type ListenerEvent = 'request' | 'connection' | 'error';
/** A TCP port a worker listens on: one of its transports' own (UCX's tcp transport opens one on
 *  each network device it uses) or a listener's; `guarded`: only allowed peers reach it. */
export interface TcpPort { address: string; port: number; guarded: boolean; kind: 'transport' | 'listener' }
export interface NativeListener { readonly host: string; readonly port: number; close(): void }
export interface NativeEndpoint {
  readonly peer: string;
  readonly failed: boolean;
  setHandler(handler: (kind: 'error' | 'close', value: GdrpcError | undefined) => void): void;
  /** Resolves to a report with `describe`, to undefined without. */
  tagSend(tag: bigint, target: NativeTarget, offset: number, length: number, id: number, completed?: () => void, describe?: boolean): Promise<NativeProtocolReport | void>;
  /** `quiet`: undefined instead of a promise when the send completed inside the call. */
  tagSend(tag: bigint, target: NativeTarget, offset: number, length: number, id: number, completed: undefined, describe: false, quiet: true): Promise<void> | undefined;
  put(target: NativeMemoryRegion, offset: number, length: number, remote: bigint, rkey: NativeRemoteKey, id: number, describe?: boolean): Promise<NativeProtocolReport | void>;
  get(target: NativeMemoryRegion, offset: number, length: number, remote: bigint, rkey: NativeRemoteKey, id: number, describe?: boolean): Promise<NativeProtocolReport | void>;
  flush(id: number): Promise<void>;
  transports(): NativeTransport[];
  localAddress(): string | undefined;
  close(force: boolean): Promise<void>;
}
export interface NativeMemoryRegion {
  readonly address: bigint;
  readonly length: number;
  readonly memoryType: string;
  packRkey(): Uint8Array;
  close(): void;
}
export interface NativeRemoteKey { close(): void }

export interface NativeCuda {
  available(): boolean;
  unavailableReason(): string | undefined;
  driverVersion(): number;
  deviceCount(): number;
  device(index: number): { index: number; name: string; totalMemory: number; pciBusId: string; computeCapability: string; uuid: string };
  canAccessPeer(a: number, b: number): boolean;
  memInfo(device: number): { free: number; total: number };
  alloc(device: number, bytes: number): bigint;
  free(ptr: bigint): void;
  allocHost(bytes: number): ArrayBuffer;
  copy(dst: bigint | ArrayBufferView, src: bigint | ArrayBufferView, bytes: number): void;
  memset(ptr: bigint, byte: number, bytes: number): void;
  pointerInfo(ptr: bigint): { memoryType: 'host' | 'cuda' | 'unregistered'; device: number };
  synchronize(device: number): void;
  // Compute (native/src/cuda_compute.cc): handles are opaque bigints, valid in their device's context.
  moduleLoad(device: number, image: Uint8Array): bigint;
  moduleUnload(device: number, module: bigint): void;
  moduleFunction(device: number, module: bigint, name: string): { handle: bigint; maxThreadsPerBlock: number };
  launch(device: number, fn: bigint, grid: number[], block: number[], sharedBytes: number, stream: bigint, args: Uint8Array, offsets: Uint32Array): void;
  streamCreate(device: number): bigint;
  streamDestroy(device: number, stream: bigint): void;
  streamSynchronize(device: number, stream: bigint): void;
  streamQuery(device: number, stream: bigint): boolean;
  streamWaitEvent(device: number, stream: bigint, event: bigint): void;
  eventCreate(device: number, timing: boolean): bigint;
  eventDestroy(device: number, event: bigint): void;
  eventRecord(device: number, event: bigint, stream: bigint): void;
  eventQuery(device: number, event: bigint): boolean;
  eventSynchronize(device: number, event: bigint): void;
  eventElapsed(device: number, start: bigint, end: bigint): number;
  /** The CUDA IPC handle (64 bytes) of the allocation `ptr` lies in, and that allocation's range. */
  ipcExport(device: number, ptr: bigint): { handle: Uint8Array; base: bigint; bytes: number };
  /** Another process's allocation mapped here (peer access as needed), with its size as mapped. */
  ipcOpen(device: number, handle: Uint8Array): { address: bigint; bytes: number };
  ipcClose(device: number, address: bigint): void;
}

export interface NativeStats { contexts: number; workers: number; endpoints: number; listeners: number;
  regions: number; rkeys: number; requests: number }

export interface NativeBinding {
  Context: new (features: string[], config: Record<string, string>) => NativeContext;
  /** busyPollUs < 0: the adaptive polling window. */
  Worker: new (context: NativeContext, busyPollUs: number, watchdogMs: number, deviceSpinUs: number, stuckSpinUs: number, allowedPeers?: string[]) => NativeWorker;
  Listener: new (worker: NativeWorker, host: string, port: number,
    handler: (kind: ListenerEvent, a: unknown, b: unknown) => boolean | void) => NativeListener;
  Endpoint: new (worker: NativeWorker, host: string, port: number, name: string | undefined, label?: string) => NativeEndpoint;
  MemoryRegion: {
    new (context: NativeContext, buffer: ArrayBuffer): NativeMemoryRegion;
    new (context: NativeContext, address: bigint, length: number, memoryType: 'host' | 'cuda'): NativeMemoryRegion;
  };
  RemoteKey: new (endpoint: NativeEndpoint, packed: Uint8Array) => NativeRemoteKey;
  ucxVersion(): string;
  /** Which wake-up build the addon is (native/CMakeLists.txt). */
  wakeup: WakeupKind;
  nativeStats(): NativeStats;
  addressOf(view: ArrayBufferView | ArrayBuffer): bigint;
  setErrorClass(errorClass: typeof GdrpcError): void;
  /** The calling thread's CPU time in ms; -1 where the clock cannot be read. */
  threadCpuMs(): number;
  /** Monotonic wall time in ms less the time the calling thread waited on a run queue
   *  (/proc/thread-self/schedstat); -1 where that cannot be read. */
  threadOwnMs(): number;
  /** Marks UCX's descriptors close-on-exec: -1 where one close_range marked every descriptor
   *  above stderr, else how many sockets and anonymous inodes it marked (native/src/close_on_exec.h). */
  closeOnExec(): number;
  cuda: NativeCuda;
}

/** How the event loop drives a worker: its own handles ('uv': immediates run between two wake-up
 *  passes), or a helper thread and a thread-safe function ('thread': busy-poll passes follow each
 *  other without an event-loop turn). */
export type WakeupKind = 'uv' | 'thread';

/** A held tag's line (Worker.sweepHeld): its messages and their bytes, and whether the sweep left
 *  one in UCX's queue that would have taken it past its cap. */
export interface HeldLine { messages: number; bytes: number; over: boolean }

/** Counters of a worker (Worker.stats()). */
export interface WorkerStats {
  liveRequests: number; liveEndpoints: number; liveListeners: number; liveRegions: number; takenMessages: number;
  /** Messages tagWatch took (the dispatcher's control messages, while it keeps up). */
  watchTakes: number;
  /** What the sweep (Worker.sweep) dropped: control messages, payloads; and its receives UCX has
   *  not completed yet (a rendezvous or eager fragments still on their way). */
  sweptControl: number; sweptData: number; sweepPending: number;
  /** Messages the sweep holds in lines now (Worker.sweepHold), and has taken into lines so far. */
  heldMessages: number; heldTotal: number;
  /** The spell a wake-up progresses in place while UCX stays BUSY with nothing to progress
   *  (GDRPC_STUCK_SPIN_US), the spells that ended in progress and those that slept. */
  stuckSpinLimitUs: number; stuckSpins: number; stuckSleeps: number;
  /** Progress passes scheduled for the next loop turn (an operation posted outside a wake-up's
   *  progress loop, a wake-up out of time, a stuck transport's retry excluded). */
  kicks: number;
  /** Described tag sends (`describe`) from host memory that UCX completed inside the call: the
   *  endpoint had a description of an eager send of the same length, which stands for them
   *  (docs/binding.md "Protocol reports"). */
  describedInline: number;
  /** Payload receives (tagRecv, tagRecvTaken) that were pending after their post and completed by
   *  the one progress pass the binding makes right after it: their bytes had come in and waited in
   *  the transport (docs/binding.md "A receive posted after its bytes came"). */
  payloadsAtPost: number;
  /** Accepted connections whose request UCX had not delivered, ended at their socket by a
   *  listener's close, and closes whose time ran out with some still open (docs/binding.md
   *  "Closing a listener"). */
  drainedSockets: number; drainsUnsettled: number;
  /** Connection requests refused before UCX read the client's bytes in them (UCX would have
   *  aborted the process on some), and those not checked (a UCX other than 1.22; docs/binding.md
   *  "Connection requests"). */
  refusedRequests: number; uncheckedRequests: number;
  /** Connections from peers outside WorkerOptions.allowedPeers that were accepted on a port
   *  before its guard went on (between UCX's listen() and the filter), and shut then. */
  guardShut: number;
  /** The polling window after work: whether it adapts, its size now, and (adaptive only) spins begun, spins that ran
   *  out with nothing found, spins cut short because the thread was preempted, spins not begun
   *  because the machine had no idle core. */
  pollAdaptive: boolean; pollWindowUs: number; pollSpins: number; pollMisses: number; pollPreempted: number; pollBusyMachine: number;
  /** Polling while transfers in device memory are in flight: the limit after the last one began
   *  (WorkerOptions.deviceSpinUs; 0 when off), such requests pending now, polling spells begun for them,
   *  and spells that reached the limit with transfers still in flight (the worker then sleeps on
   *  its fd). */
  deviceSpinLimitUs: number; deviceInFlight: number; deviceSpins: number; deviceSpinLimits: number;
}
