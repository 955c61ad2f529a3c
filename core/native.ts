// Loads the native addon (build/Release/gdrpc.node) once, after putting the project's UCX
// defaults into the environment, and registers GdrpcError so native code throws that class.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { isMainThread } from 'node:worker_threads';
import { Code, GdrpcError } from './errors.ts';
import { packageRoot } from './package-root.ts';
import type { NativeBinding } from './ucx/native-types.ts';

/**
 * UCX settings gdrpc relies on, applied to process.env only where the user has not set the
 * variable. They are (re)applied before every ucp_config_read (Context.create), so code that adds
 * entries before creating its context gets them; variables UCX reads at library load (logging)
 * take effect only if added before the first use of the addon.
 */
export const UCX_DEFAULTS: Record<string, string> = {
  // PEER error mode (on every endpoint) otherwise turns off pipelined rendezvous, which staged
  // GPU transfers need.
  UCX_RNDV_PIPELINE_ERROR_HANDLING: 'y',
  // UCX's memory hooks (patched mmap/munmap and malloc) are not safe in Node's multi-threaded
  // process: the default "bistro" hooks crashed peers with SIGSEGV, "reloc" hooks deadlocked one
  // in malloc (docs/binding.md has the measurements). Without memory events UCX runs without its
  // registration and memtype caches; gdrpc passes a memh with every operation, so neither costs it
  // (measured on an H200: `npm run bench -- mem-events`). Read when the addon loads.
  UCX_MEM_EVENTS: 'no',
  // UCX's TCP transport writes an incoming PUT request to whatever address the sender names,
  // without an rkey or the RMA feature: with it on, any peer that can connect can write anywhere
  // in this process (measured: a peer overwrote a secret; a put to 0x1000 crashed the process).
  // Off, this process does not advertise TCP put, so a peer's UCX never sends one (docs/security.md).
  UCX_TCP_PUT_ENABLE: 'n',
  // Processes on one node talk over TCP loopback (see UCX_MM_ERROR_HANDLING below): segments of
  // 256 KiB instead of UCX's default move a 64 MiB host tensor 2-2.5x faster (measured on the
  // 2-core CPU box: 0.80 -> 2.08 GB/s); UCX's buffers grow only with what is in flight.
  UCX_TCP_TX_SEG_SIZE: '256k',
  UCX_TCP_RX_SEG_SIZE: '256k',
  // Our own config keys and other tools' UCX_* variables are not errors worth a warning per process.
  UCX_WARN_UNUSED_ENV_VARS: 'n',
  // Keepalive detects a hung or vanished peer on lanes without a connection of their own (shared
  // memory): UCX's 20 s default becomes 1 s (docs/binding.md has the measurements).
  UCX_KEEPALIVE_INTERVAL: '1s',
  // A server restarted on its port after a crash found it taken for a minute: the connections the
  // dead process had closed lingered in TIME_WAIT on that port, and UCX binds its listener without
  // SO_REUSEADDR by default ("Device is busy"). With it, only a socket that listens there refuses
  // the bind, as for any TCP server (test/rpc/liveness.test.ts).
  UCX_TCP_CM_REUSEADDR: 'y',
  // With 'auto', UCX disables cuda_ipc GET unless NVML confirms every NVLink of device 0; then
  // ucp_get on GPU memory (the RMA mover, remote-tensor pulls) silently becomes a software copy
  // while the endpoint still lists a cuda_ipc lane (docs/gpu.md has the sources).
  UCX_CUDA_IPC_ENABLE_GET_ZCOPY: 'y',
};

// Not set: UCX_MM_ERROR_HANDLING. UCX keeps its shared-memory transports (posix, sysv) off
// endpoints that must survive a failing peer, with reason: a peer that died mid-message left the
// receiving worker's shared FIFO stuck (measured: a server at 100% CPU that answered no one
// after a client was killed mid-upload), and a peer that maps that FIFO can write into it.
// Processes on one node therefore talk over TCP loopback (UCX puts no CMA lane on such endpoints:
// large host tensors go as fragmented rendezvous over TCP), and GPU memory over cuda_ipc, which
// handles peer failure. Trusted peers on one node choose shared memory with
// RuntimeOptions.sharedMemory (UCX_MM_ERROR_HANDLING=y for runtimes that do not choose;
// docs/security.md "Shared memory between trusted peers").

/** Copies UCX_DEFAULTS into process.env where a variable is not already set. */
export function applyUcxDefaults(): void {
  for (const [name, value] of Object.entries(UCX_DEFAULTS)) {
    if (process.env[name] === undefined) process.env[name] = value;
  }
  if (isMainThread) return;
  // A worker thread's process.env is its own copy, which UCX (getenv) never reads: the values go
  // into the process's environment too, where it has none. Without this, a process whose first
  // use of the addon was in a worker thread ran UCX's own defaults: memory hooks installed while
  // the main thread ran, whose self-test moves the heap's end (brk/sbrk 4 KiB up and down) under
  // glibc's malloc (a heap abort, "break adjusted to free malloc space", or SIGSEGV: 1 run in 60
  // of test/native/thread-teardown-child.ts with two CPU hogs beside it; docs/binding.md).
  const values: Record<string, string> = {};
  for (const name of Object.keys(UCX_DEFAULTS)) {
    const value = process.env[name];
    if (value !== undefined) values[name] = value;
  }
  envHelper().setDefaults(values);
}

// GDRPC_ADDON_PATH loads another build of the addon (e.g. the libuv-free wake-up variant, built
// with -DGDRPC_WAKEUP=thread, in tests).
const addonPath = process.env.GDRPC_ADDON_PATH ?? join(packageRoot(), 'build', 'Release', 'gdrpc.node');
let binding: NativeBinding | undefined;

interface EnvHelper { setDefaults(values: Record<string, string>): void }
let envAddon: EnvHelper | undefined;

/** The setenv helper (native/env/env.cc), built next to the addon. */
function envHelper(): EnvHelper {
  if (envAddon) return envAddon;
  const path = [join(dirname(addonPath), 'gdrpc_env.node'), join(packageRoot(), 'build', 'Release', 'gdrpc_env.node')].find(existsSync);
  if (path === undefined) {
    throw new GdrpcError(Code.FAILED_PRECONDITION,
      `the native addon's environment helper (gdrpc_env.node, next to ${addonPath}) is missing, which a worker thread ` +
      'needs before it loads UCX: run `npm install` to rebuild the addon');
  }
  envAddon = createRequire(import.meta.url)(path) as EnvHelper;
  return envAddon;
}

/** The native addon; throws FAILED_PRECONDITION (run `npm install`) when it has not been built. */
export function native(): NativeBinding {
  if (binding) return binding;
  if (!existsSync(addonPath)) {
    throw new GdrpcError(Code.FAILED_PRECONDITION,
      `the native addon is not built (${addonPath} is missing). gdrpc builds it in its install script, which ` +
      'npm runs for dependencies only when allowed: run `npm install-scripts approve gdrpc` (or add "allowScripts": ' +
      '{ "gdrpc": true } to package.json), then `npm rebuild gdrpc`; in a gdrpc checkout run `npm install`');
  }
  applyUcxDefaults();
  try {
    binding = createRequire(import.meta.url)(addonPath) as NativeBinding;
  } catch (cause) {
    throw new GdrpcError(Code.FAILED_PRECONDITION,
      `cannot load the native addon ${addonPath}: ${(cause as Error).message}; run \`npm install\` to rebuild it`, { cause });
  }
  binding.setErrorClass(GdrpcError);
  return binding;
}
