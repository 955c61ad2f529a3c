// Which physical path a transfer can take, predicted from the transports of the endpoint's lanes
// and the memory types at both ends, before anything moves: noStaging refuses on it, and a receiver
// reports it (UCX does not describe a receive's protocol). A sender reports what UCX says it did
// instead (protocol.ts).
import type { Endpoint } from '../../ucx/index.ts';
import type { MoverName, TransferPath } from './mover.ts';

const SHM = new Set(['posix', 'sysv', 'xpmem', 'cma', 'knem']);
const RDMA = /^(rc|dc|ud|rc_mlx5|rc_verbs|dc_mlx5|ud_mlx5|ud_verbs|srd)/;

// An endpoint's lanes do not change after the handshake: ask UCX once.
const cache = new WeakMap<Endpoint, Set<string>>();
function transportsOf(endpoint: Endpoint): Set<string> {
  let names = cache.get(endpoint);
  if (names === undefined) {
    names = new Set(endpoint.transports().map((lane) => lane.transport));
    cache.set(endpoint, names);
  }
  return names;
}

/** Whether UCX was told to enable cuda_ipc GET zero-copy whatever NVML says about NVLink. */
function cudaIpcGet(): boolean {
  return /^(y|yes|on|1|true)$/i.test(process.env.UCX_CUDA_IPC_ENABLE_GET_ZCOPY ?? '');
}

/** The path of a transfer of `bytes` by `mover` over `endpoint` between memory types `from` and `to`. */
export function transferPath(mover: MoverName, endpoint: Endpoint, from: 'host' | 'cuda', to: 'host' | 'cuda', bytes = 1): TransferPath {
  // Nothing moves for an empty tensor, whatever memory it names: never staged, never refused.
  if (bytes === 0) return 'inline';
  if (mover === 'inline') return from === 'cuda' || to === 'cuda' ? 'staged' : 'inline';
  const names = transportsOf(endpoint);
  const rdma = [...names].some((name) => RDMA.test(name));
  if (from === 'cuda' || to === 'cuda') {
    // UCX 1.22 does not put cuda_ipc on RMA lanes: an H200 measured 0.9 GB/s for a 64 MiB ucp_get
    // between two processes against 380 GB/s for the same bytes by tag (cuda_ipc zero-copy, seen
    // with UCX_PROTO_INFO=used). RMA on GPU memory is therefore staged unless RDMA (GDR) is there
    // or UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y overrides UCX's NVLink check (the cause of that figure).
    // cuda_ipc maps GPU memory only: between GPU and host memory UCX bounces through buffers of
    // its own (a "frag" pipeline or a memory-type copy), whatever lanes the endpoint has.
    const ipc = names.has('cuda_ipc') && from === 'cuda' && to === 'cuda';
    if (mover === 'tag' && ipc) return 'cuda_ipc';
    // With GET forced on (docs/gpu.md "UCX settings"), cuda_ipc serves ucp_get zero-copy too.
    if (mover === 'rma' && ipc && cudaIpcGet()) return 'cuda_ipc';
    if (rdma) return 'rdma';
    return 'staged';
  }
  if ([...names].some((name) => SHM.has(name))) return 'shm';
  if (rdma) return 'rdma';
  return 'tcp';
}
