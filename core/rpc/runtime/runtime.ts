// Everything a Client or Server shares with the others of its runtime: the UCX context and worker
// (DESIGN.md "Progress model"), the control-frame dispatcher, the pools mapped on the context, the
// remote-tensor owner and the counters. An application may hold several (each its own worker);
// the simple case uses the default one, which closes itself when its last user goes.
// Pools live as long as the context, not as long as the Client that first wanted one, so that a
// peer's cuda_ipc mapping of a pool (UCX keeps those cached) never points at memory a closed
// client freed and reallocated.
import { Context, Worker, isPeerPrefixList, PEER_PREFIXES_EXPECTED, type TcpPort } from '../../ucx/index.ts';
import { TensorPool, type Device, type TensorPoolOptions } from '../../tensor/index.ts';
import { Dispatcher } from './dispatcher.ts';
import { Accept, checkOptions, invalidOption, rule, type OptionRules } from '../../tensor/options.ts';
import { Code, GdrpcError } from '../../errors.ts';
import { cudaReceives, type MoverStats } from './memory-support.ts';
import { RemoteOwner } from './remote-owner.ts';
import { SendSlots } from './send-slots.ts';
import { BlockCopier } from '../../compute/blocks.ts';
import { DEFAULT_MAX_WAITING_BYTES, WaitingLedger } from './waiting.ts';
import { RefusalCount } from './refusals.ts';
import { DEFAULT_MAX_HELD_PAYLOAD_BYTES, HeldBytes } from './held-bytes.ts';
import { DEFAULT_MAX_LENT_WINDOW_BYTES, DEFAULT_MAX_WINDOW_BYTES, OpeningWindows, WindowLoans } from './window-loans.ts';

/** Largest control frame any connection in this process accepts (the receive buffer size). */
export const DEFAULT_FRAME_BYTES = 4 << 20;

/** Worker polling after work: a fixed window of at most 10 s (as the binding allows), or
 *  'adaptive'; the busyPollUs option's rule. */
export const BUSY_POLL_US = rule(`'adaptive' or an integer number of microseconds from 0 to 10000000`,
  (value) => value === 'adaptive' || Accept.integer(0, 10_000_000, 'microseconds').accepts(value));

/** allowedPeers: address prefixes, Worker.create's rule. */
const ALLOWED_PEERS = rule(PEER_PREFIXES_EXPECTED, isPeerPrefixList);
/** networkDevices: UCX device names as ucx_info lists them ("lo", "eth0", "mlx5_0:1"). */
const NETWORK_DEVICES = rule('a non-empty array of UCX network device names (e.g. ["lo"], ["eth0", "mlx5_0:1"])',
  (value) => Array.isArray(value) && value.length > 0 && value.every((name) => typeof name === 'string' && /^[A-Za-z0-9_.:-]+$/.test(name)));

const RUNTIME_OPTIONS: OptionRules<RuntimeOptions> = { busyPollUs: BUSY_POLL_US, sharedMemory: Accept.boolean, allowedPeers: ALLOWED_PEERS, networkDevices: NETWORK_DEVICES, maxWaitingBytes: Accept.positiveBytes, maxHeldPayloadBytes: Accept.positiveBytes, maxLentWindowBytes: Accept.positiveBytes, maxWindowBytes: Accept.bytes };

/** GDRPC_ALLOWED_PEERS (prefixes separated by commas or spaces), checked; undefined when unset or blank. */
function allowedPeersFromEnvironment(): string[] | undefined {
  const text = process.env.GDRPC_ALLOWED_PEERS;
  if (text === undefined || text.trim() === '') return undefined;
  const list = text.split(/[\s,]+/).filter((entry) => entry !== '');
  if (!ALLOWED_PEERS.accepts(list)) throw invalidOption('GDRPC_ALLOWED_PEERS', text, `${ALLOWED_PEERS.expected.replace('an array of', 'a list of')}, separated by commas or spaces`);
  return list;
}

/** Whether two allowedPeers choices are the same (as sets; undefined: anyone). */
function samePeers(a: readonly string[] | undefined, b: readonly string[] | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  const left = new Set(a);
  const right = new Set(b);
  return left.size === right.size && [...left].every((entry) => right.has(entry));
}

/** Whether GDRPC_UNSAFE_RMA asks for the RMA mover, giving up isolation between peers. */
export function unsafeRmaEnabled(): boolean {
  return /^(1|y|yes|on|true)$/i.test(process.env.GDRPC_UNSAFE_RMA ?? '');
}

/** GDRPC_BUSY_POLL_US, checked: a typo there would otherwise fail every Client and Server with a
 *  message about an option nobody passed. */
function busyPollFromEnvironment(): number | 'adaptive' {
  const text = process.env.GDRPC_BUSY_POLL_US;
  if (text === undefined || text.trim() === '' || text.trim() === 'adaptive') return 'adaptive';
  const value = Number(text);
  if (!BUSY_POLL_US.accepts(value)) throw invalidOption('GDRPC_BUSY_POLL_US', text, BUSY_POLL_US.expected);
  return value;
}

/** Options of Runtime.create. */
export interface RuntimeOptions {
  /** Keep progressing the worker this long after work before sleeping (lower latency for CPU);
   *  0 never, 'adaptive' a window sized from recent gaps between replies (docs/binding.md "Polling
   *  after work"). Default GDRPC_BUSY_POLL_US from the environment, else 'adaptive'. */
  busyPollUs?: number | 'adaptive';
  /** Shared memory (UCX's posix and sysv transports) for control messages and host tensors with
   *  peers on this host, instead of TCP loopback: for trusted peers only. A peer that dies
   *  mid-message can leave this worker's shared FIFO stuck (it answers no one), and a peer that
   *  maps the FIFO can write into it (docs/security.md "Shared memory between trusted peers").
   *  Both sides must choose it: a server without it refuses a client with it. Default:
   *  UCX_MM_ERROR_HANDLING from the environment (y turns it on), else off. */
  sharedMemory?: boolean;
  /** Who may open a TCP connection to this runtime: numeric IPv4 or IPv6 addresses, each with an
   *  optional /bits ("10.0.0.0/8", "127.0.0.1", "::1"). It guards the ports UCX's tcp transport
   *  opens on every network device it uses (a Client's runtime has them too) and its Servers'
   *  listeners: a socket filter drops every other source's TCP segments, so such a peer never
   *  completes a handshake and UCX reads nothing it sends. UCX's own framing is not authenticated:
   *  a peer that reaches those ports can crash or write into this process before any token is
   *  checked (docs/security.md "UCX's own ports"). List every host whose peers connect here, and
   *  every host this runtime connects to (UCX connects transports both ways). Default
   *  GDRPC_ALLOWED_PEERS from the environment (separated by commas or spaces), else anyone. Linux;
   *  TCP only (RDMA devices are the fabric's to guard). */
  allowedPeers?: string[];
  /** The network devices UCX may use (UCX_NET_DEVICES), e.g. ["lo"] for a runtime whose peers
   *  all run on this host: UCX's tcp transport then listens on loopback only. RDMA devices are
   *  network devices too ("mlx5_0:1"). Default: UCX_NET_DEVICES from the environment, else all. */
  networkDevices?: string[];
  /** What this runtime's connections may hold, all together, of messages for peers not taking
   *  them: waiting for their message windows (docs/wire.md "Message window"), counted as bytes of
   *  messages plus 4 KiB a frame, and handed to UCX and not yet sent past 8 MiB a connection (a
   *  peer that stopped reading its socket). Past it the connection whose peer has gone longest
   *  without taking 1 MiB of them is closed RESOURCE_EXHAUSTED, then the next, until the rest
   *  fits. What waits for one peer's window is also capped on its own (32 MiB). Default 256 MiB. */
  maxWaitingBytes?: number;
  /** Bytes of tensor payloads that no frame has announced yet which this runtime's connections may
   *  hold, all together, weighed by their length, 4 KiB at least each (held-bytes.ts). Past it the
   *  connection holding the most is closed RESOURCE_EXHAUSTED. Each connection holds 64 such
   *  payloads at most (1,024 while control messages of its own wait to be read), for 10-20 s.
   *  Default 1 GiB. */
  maxHeldPayloadBytes?: number;
  /** Message window this runtime's connections open with, all together, beyond 256 KiB each
   *  (docs/wire.md "Message window"): a connection opens with as much as is free, up to its whole
   *  window (twice the receive buffer, 8 MiB), and keeps it for its life. With
   *  maxLentWindowBytes this bounds what all peers together may have in UCX's queue at once:
   *  256 KiB a connection, plus both. Default 256 MiB. */
  maxWindowBytes?: number;
  /** Message window this runtime lends its peers, all together, beyond the window each
   *  connection opened with, for messages larger than half of that (docs/wire.md "Message
   *  window"). A peer asks for a loan (WANT) for one such message at a time; asks wait, in order,
   *  while the loans out fill it (one larger than all of it goes when nothing else is lent).
   *  Default 64 MiB. */
  maxLentWindowBytes?: number;
}

/** Whether UCX_MM_ERROR_HANDLING turns shared memory on for runtimes that do not choose. UCX reads
 *  the variable as its boolean (y, yes, 1, on / n, no, 0, off, any case) when any context is
 *  made, whatever the runtime chose; another value fails every runtime in UCX with an "Invalid
 *  parameter" that names nothing, so it is refused here with its name. */
function sharedMemoryFromEnvironment(): boolean {
  const text = process.env.UCX_MM_ERROR_HANDLING;
  if (text === undefined) return false;
  if (/^(y|yes|1|on)$/i.test(text)) return true;
  if (/^(n|no|0|off)$/i.test(text)) return false;
  throw invalidOption('UCX_MM_ERROR_HANDLING', text, "y, yes, 1 or on; n, no, 0 or off (UCX's boolean)");
}

/** A UCX context and worker with the pools, remote tensors and counters of the Clients and
 *  Servers made on it. Runtime.create() makes one the caller closes; Runtime.default() is the
 *  process's implicit one. */
export class Runtime {
  // The one process-wide slot: which runtime Clients and Servers without `runtime` use.
  static #default: Runtime | undefined;
  /** Where small control frames are sent from. */
  readonly sendSlots = new SendSlots();
  /** Remote tensors exposed by calls on this runtime, and where their pulls are served. */
  readonly owner = new RemoteOwner();
  /** Block copies of the pulls this runtime serves and makes (pullAll's stacked batches). */
  readonly blocks = new BlockCopier();
  /** Memory registered per transfer because a tensor was not in a mapped pool (moverStats). */
  readonly stats: MoverStats = { oneOffRegistrations: 0 };
  /** Whether transfers ask UCX how it moved their bytes, and peers exchange those reports (SENT
   *  frames): GDRPC_PROTOCOL_REPORTS=0 turns both off, read once when the runtime opens (docs/gpu.md
   *  "Transfer paths"). */
  readonly describes = process.env.GDRPC_PROTOCOL_REPORTS !== '0';
  /** Whether equal-sized tensors of a message share one tag message (gathered transfers, both
   *  ways: this side announces `gat` only then): GDRPC_GATHER=0 turns it off, read once when the
   *  runtime opens (docs/runtime-api.md "Gathered tag transfers"). */
  readonly gathers = process.env.GDRPC_GATHER !== '0';
  /** What this runtime's connections hold for peers not taking it (maxWaitingBytes). */
  readonly waiting: WaitingLedger;
  /** Tensors of refused frames its connections are turning away (refusals.ts). */
  readonly refusals = new RefusalCount();
  /** Bytes of unannounced tensor payloads its connections hold (maxHeldPayloadBytes). */
  readonly heldBytes: HeldBytes;
  /** Message window lent to its connections' peers beyond their opening windows (maxLentWindowBytes). */
  readonly windowLoans: WindowLoans;
  /** Message window its connections opened with beyond 256 KiB each (maxWindowBytes). */
  readonly openingWindows: OpeningWindows;
  /** Internal, for tests on machines without a GPU: stage host tensors too (non-inline, non-empty),
   *  through an ordinary host bounce, so that the staging logic runs end to end on host memory. */
  hostStagingForTests = false;
  /** The pool per device that pool() hands out (the largest asked for so far). */
  readonly #pools = new Map<string, TensorPool>();
  readonly #all = new Set<TensorPool>();
  /** Clients and Servers on this runtime, each with how to close it. */
  readonly #users = new Map<object, () => Promise<void>>();
  /** processPool() keeps the default runtime open until closeProcessPools(). */
  #poolHold = false;
  #mapsCuda: boolean | undefined;
  #closing: Promise<void> | undefined;

  /** `sharedMemory`: whether this runtime talks to peers on this host over shared memory
   *  (RuntimeOptions.sharedMemory). */
  private constructor(readonly context: Context, readonly worker: Worker, readonly dispatcher: Dispatcher, readonly rma: boolean, readonly implicit: boolean, readonly sharedMemory: boolean,
    /** Who may connect to this runtime's TCP ports (RuntimeOptions.allowedPeers); undefined: anyone. */
    readonly allowedPeers: readonly string[] | undefined, maxWaitingBytes: number, maxHeldPayloadBytes: number, maxLentWindowBytes: number, maxWindowBytes: number) {
    this.waiting = new WaitingLedger(maxWaitingBytes);
    this.heldBytes = new HeldBytes(maxHeldPayloadBytes);
    this.windowLoans = new WindowLoans(maxLentWindowBytes);
    this.openingWindows = new OpeningWindows(maxWindowBytes);
  }

  /** What this runtime's connections hold now of messages for peers not taking them (waiting
   *  for their windows, or in UCX's hands), counted as RuntimeOptions.maxWaitingBytes counts it. */
  get waitingBytes(): number { return this.waiting.total; }

  /** Message window lent to its connections' peers now, beyond their opening windows, how many
   *  peers wait for a loan (RuntimeOptions.maxLentWindowBytes), and what their opening windows
   *  took beyond 256 KiB each (maxWindowBytes). */
  get lentWindow(): { bytes: number; waiting: number; opened: number } {
    return { bytes: this.windowLoans.lent, waiting: this.windowLoans.waiting, opened: this.openingWindows.taken };
  }

  /** The TCP ports this runtime listens on (its UCX transports' own on each network device, and its
   *  Servers' listeners), and whether allowedPeers guards each: what a peer on the network can
   *  reach before any token is checked (docs/security.md "UCX's own ports"). */
  ports(): TcpPort[] {
    return this.worker.ports();
  }

  /** A runtime of the caller's own: its own UCX context and worker, closed by close(). */
  static create(options: RuntimeOptions = {}): Runtime {
    checkOptions('RuntimeOptions', options, RUNTIME_OPTIONS);
    return Runtime.#open(options, false);
  }

  /** The process's default runtime, created on first use with `options` (busyPollUs: else
   *  GDRPC_BUSY_POLL_US, else 'adaptive'; later callers share what the first chose). A later
   *  caller asking for another `sharedMemory` than it has gets FAILED_PRECONDITION: that choice is
   *  one of trust, not of tuning. It closes itself when its last Client, Server and processPool
   *  hold are gone; the next use makes a new one. */
  static default(options: RuntimeOptions = {}): Runtime {
    checkOptions('RuntimeOptions', options, RUNTIME_OPTIONS);
    const open = Runtime.#default;
    if (open !== undefined && options.sharedMemory !== undefined && options.sharedMemory !== open.sharedMemory) {
      throw new GdrpcError(Code.FAILED_PRECONDITION, `the default runtime is open with sharedMemory ${open.sharedMemory}; Runtime.create() makes one with another choice`);
    }
    if (open !== undefined && options.allowedPeers !== undefined && !samePeers(options.allowedPeers, open.allowedPeers)) {
      throw new GdrpcError(Code.FAILED_PRECONDITION, `the default runtime is open with allowedPeers ${JSON.stringify(open.allowedPeers ?? 'anyone')}; Runtime.create() makes one with another choice`);
    }
    Runtime.#default ??= Runtime.#open(options, true);
    return Runtime.#default;
  }

  /** The default runtime if one is open; never creates one (stats of a process that has none). */
  static current(): Runtime | undefined { return Runtime.#default; }

  static #open(options: RuntimeOptions, implicit: boolean): Runtime {
    // Without the RMA feature UCX serves no get or put from a peer, emulated or not: a context
    // with it would let any peer that connects read and write this process's host memory
    // through UCX's software RMA emulation (docs/security.md).
    const rma = unsafeRmaEnabled();
    const busyPollUs = options.busyPollUs ?? busyPollFromEnvironment();
    // Checked even when the option decides: UCX reads the variable anyway.
    const fromEnvironment = sharedMemoryFromEnvironment();
    const sharedMemory = options.sharedMemory ?? fromEnvironment;
    // UCX keeps shared memory off endpoints in PEER error mode unless MM_ERROR_HANDLING says so.
    const config: Record<string, string> = options.sharedMemory === undefined ? {} : { MM_ERROR_HANDLING: sharedMemory ? 'y' : 'n' };
    if (options.networkDevices !== undefined) config.NET_DEVICES = options.networkDevices.join(',');
    // The option was checked with the others (create, default).
    const allowedPeers = options.allowedPeers ?? allowedPeersFromEnvironment();
    const context = Context.create({ features: rma ? ['tag', 'rma', 'wakeup'] : ['tag', 'wakeup'], config });
    let worker: Worker;
    try {
      worker = Worker.create(context, { busyPollUs, ...(allowedPeers !== undefined ? { allowedPeers } : {}) });
    } catch (error) {
      context.close();
      throw error;
    }
    return new Runtime(context, worker, new Dispatcher(worker, DEFAULT_FRAME_BYTES), rma, implicit, sharedMemory, allowedPeers,
      options.maxWaitingBytes ?? DEFAULT_MAX_WAITING_BYTES, options.maxHeldPayloadBytes ?? DEFAULT_MAX_HELD_PAYLOAD_BYTES,
      options.maxLentWindowBytes ?? DEFAULT_MAX_LENT_WINDOW_BYTES, options.maxWindowBytes ?? DEFAULT_MAX_WINDOW_BYTES);
  }

  /** Whether close() has begun. */
  get closed(): boolean { return this.#closing !== undefined; }

  /** Whether this UCX context can register CUDA memory at all (ucp_context_query: fixed for its life). */
  get mapsCuda(): boolean {
    this.#mapsCuda ??= this.context.memoryTypes().includes('cuda');
    return this.#mapsCuda;
  }

  /** Whether this process stages what it receives into GPU memory: it has GPUs, but this UCX cannot
   *  register CUDA memory (announced to peers as `stg`, docs/gpu.md "Memory that UCX cannot map"). */
  get stagesCudaReceives(): boolean {
    return cudaReceives() && !this.mapsCuda;
  }

  /** Internal: `user` (a Client or Server) now runs on this runtime; close() closes it first. */
  attach(user: object, close: () => Promise<void>): void {
    if (this.closed) throw new GdrpcError(Code.FAILED_PRECONDITION, 'the runtime is closed');
    this.#users.set(user, close);
  }

  /** Internal: `user` is done; the default runtime closes with its last user. */
  async detach(user: object): Promise<void> {
    if (!this.#users.delete(user)) return;
    // While close() runs, the users it closes come back here: they must not wait for it.
    if (this.#closing === undefined && this.#idle()) await this.close();
  }

  /** Internal: keeps the default runtime open for processPool until releasePoolHold(). */
  holdPools(): void { if (this.implicit) this.#poolHold = true; }

  /** Internal: closeProcessPools(); the default runtime closes when no user is left either. */
  async releasePoolHold(): Promise<void> {
    if (!this.#poolHold) return;
    this.#poolHold = false;
    if (this.#closing === undefined && this.#idle()) await this.close();
  }

  #idle(): boolean { return this.implicit && !this.#poolHold && this.#users.size === 0; }

  /** The runtime's pool on `device` (pinned host memory with `pinned`), created on first use with
   *  `bytes`. With `grow`, a request for more bytes than it has makes a larger one that later requests get;
   *  the smaller stays until the runtime closes (its tensors may be live, a peer may map it). */
  pool(device: Device, options: { bytes: number; allowOverflow?: boolean; pinned?: boolean; grow?: boolean }): TensorPool {
    const key = options.pinned === true ? `${device}+pinned` : device;
    let pool = this.#pools.get(key);
    if (pool === undefined || pool.closed || (options.grow === true && pool.stats().capacity < options.bytes)) {
      pool = this.createPool({ device, bytes: options.bytes, allowOverflow: options.allowOverflow ?? true, ...(options.pinned === true ? { pinned: true } : {}) });
      this.#pools.set(key, pool);
    }
    return pool;
  }

  /** A new pool on this runtime's context, closed with it unless closed before. */
  createPool(options: TensorPoolOptions): TensorPool {
    if (this.closed) throw new GdrpcError(Code.FAILED_PRECONDITION, 'the runtime is closed');
    for (const pool of this.#all) if (pool.closed) this.#all.delete(pool);
    const pool = TensorPool.create(this.context, options);
    this.#all.add(pool);
    return pool;
  }

  /** The open pools made here, for stats and tests. */
  pools(): TensorPool[] { return [...this.#all].filter((pool) => !pool.closed); }

  /** Closes the Clients and Servers on this runtime (servers without grace), then the pools
   *  (tensors still held become released), the worker and the context. */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    if (Runtime.#default === this) Runtime.#default = undefined;
    await Promise.allSettled([...this.#users.values()].map((close) => close()));
    this.#users.clear();
    this.blocks.close();
    // The endpoints close while the dispatcher still receives, then what peers sent before they
    // were cut off is taken and dropped: left in UCX's queue, each message would be reported on
    // stdout when the worker is destroyed (a client that closed right after its last CUDA call
    // printed one such line on the H200 machine).
    try {
      await this.worker.closeChildren();
      this.dispatcher.drainForClose();
    } finally {
      this.dispatcher.stop();
      await this.worker.close();
    }
    // After the worker: a receive its connection's close cancelled may still hold pool memory
    // until UCX completes it (a result whose bytes had not come), and a region in use cannot be
    // unmapped; closed first, its pool stayed mapped and the context refused to close.
    for (const pool of this.#all) {
      if (pool.closed) continue;
      try {
        pool.close({ force: true });
      } catch (error) {
        process.emitWarning(`closing the runtime's pool on ${pool.device}: ${(error as Error).message}`, { code: 'GDRPC_POOL_CLOSE' });
      }
    }
    this.#all.clear();
    this.#pools.clear();
    this.context.close();
  }
}

/** Counters of `runtime`'s movers (default: the default runtime; zeros when none is open). */
export function moverStats(runtime: Runtime | undefined = Runtime.current()): MoverStats {
  return { ...(runtime?.stats ?? { oneOffRegistrations: 0 }) };
}
