// The path of a transfer as UCX reports it: the info string of the request that moved the bytes
// (ucp_request_query, proto v2), parsed and mapped to a path class. Samples (UCX 1.22, CPU box):
//   "{cpml|proto|init} tag_send from host memory length 8193 eager zero-copy copy-out tcp/lo 10.2 MB/s 767.92 us"
//   "{cpml|proto|cb|init|rk_use} rndv_send from host memory length 1048576 fragmented copy-in copy-out sysv/memory 6795.5 MB/s 147.16 us"
//   "{cpml|cb|rcv_tag} recv length 1048576 host memory"   (a receive says no more than this)
// docs/binding.md "Protocol reports" and docs/gpu.md "Transfer paths" explain the mapping.
import type { TransferPath } from './mover.ts';

/** One UCX request description, taken apart. */
export interface UcxProtocol {
  /** The description without UCX's request flags. */
  text: string;
  /** 'tag_send', 'rndv_send', 'rndv_put', 'get', ... or 'recv' for a receive. */
  operation: string;
  /** Memory type UCX detected for this side's buffer ('host', 'cuda', ...), if it says. */
  memoryType: string | undefined;
  /** What UCX calls the protocol, e.g. "eager zero-copy copy-out", "rendezvous zero-copy read from remote". */
  description: string;
  /** Transports named in the description and its lane configuration, e.g. ['tcp'] or ['cuda_copy', 'posix']. */
  transports: string[];
  /** A rendezvous send the receiver carried out (it pulled the data): UCX described the protocol it
   *  expected the receiver to pick for memory like the sender's, not what the receiver picked. */
  receiverPulled: boolean;
}

const TRANSPORT = /\b(tcp|posix|sysv|xpmem|cma|knem|self|cuda_ipc|cuda_copy|gdr_copy|rocm_ipc|rocm_copy|rocm_gdr|ze_ipc|ze_copy|ze_gpu|rc_mlx5|rc_verbs|dc_mlx5|ud_mlx5|ud_verbs|rc_x|dc_x|ud_x|srd|gga)\b/g;
const SHM = new Set(['posix', 'sysv', 'xpmem', 'cma', 'knem', 'self']);
const RDMA = /^(rc|dc|ud|srd|gga)/;
/** Transports that copy between memory types inside one process (a bounce, never a network path). */
const MEMTYPE_COPY = new Set(['cuda_copy', 'gdr_copy', 'rocm_copy', 'rocm_gdr', 'ze_copy']);
/** Protocols that pass the bytes through buffers of UCX's own: copies at either end, host fragments
 *  of a pipeline, or an emulated RMA. Harmless between host buffers, staging when a GPU buffer is involved. */
const BOUNCE = /\b(short|copy-in|copy-out|frag host|pipeline|software emulation)\b/;

/** Parses a ucp_request_query info string; undefined when it is not one UCX proto v2 writes. */
export function parseProtocol(raw: string): UcxProtocol | undefined {
  const text = raw.replace(/^\{[^}]*\}\s*/, '').trim();
  const recv = /^recv length \d+ (\S+) memory$/.exec(text);
  if (recv) return { text, operation: 'recv', memoryType: recv[1], description: '', transports: [], receiverPulled: false };
  // "<op>[(attrs)] from|into|to <memory> length <n> <description and lanes> [<bw> MB/s <time> us]"
  const send = /^(\w+)(?:\([^)]*\))? (?:from|into|to|of) (?:\S+ )?(\w+)(?: memory|\/\S+) length \d+ (.*)$/.exec(text);
  if (!send) return undefined;
  const rest = send[3]!.replace(/\s+\S+ [KMGT]?B\/s\s+\S+ [mun]?s$/, '');
  const transports = [...new Set([...rest.matchAll(TRANSPORT)].map((match) => match[1]!))];
  const firstLane = rest.search(TRANSPORT);
  const description = (firstLane < 0 ? rest : rest.slice(0, firstLane)).replace(/[\s,]+$/, '');
  const operation = send[1]!;
  return {
    text, operation, memoryType: send[2], description, transports,
    receiverPulled: operation === 'tag_send' && /^rendezvous\b/.test(description) && /read from remote/.test(description),
  };
}

/** The path class of a transfer UCX described as `protocol`, between buffers of memory types
 *  `local` (this side) and `remote` (the peer's). Undefined when the description names no transport. */
export function pathOfProtocol(protocol: UcxProtocol, local: 'host' | 'cuda', remote: 'host' | 'cuda'): TransferPath | undefined {
  const { transports, description } = protocol;
  if (transports.length === 0) return undefined;
  const network = transports.filter((name) => !MEMTYPE_COPY.has(name));
  const rdma = network.some((name) => RDMA.test(name));
  if (local === 'host' && remote === 'host') {
    if (network.some((name) => SHM.has(name))) return 'shm';
    if (rdma) return 'rdma';
    return network.includes('tcp') ? 'tcp' : undefined;
  }
  // A GPU buffer at one end at least: anything but a zero-copy transfer between the two buffers
  // went through memory of UCX's own (host fragments, a memory-type copy, packed eager messages).
  if (BOUNCE.test(description) || network.length < transports.length) return 'staged';
  // cuda_ipc maps GPU memory only: it cannot be what carried bytes to or from host memory. A
  // receiver-pulled rendezvous between unlike memory is UCX's estimate for like memory: the
  // receiver used something else, which for these transports means a bounce.
  if (network.includes('cuda_ipc')) return local === 'cuda' && remote === 'cuda' ? 'cuda_ipc' : 'staged';
  if (rdma && !(protocol.receiverPulled && local !== remote)) return 'rdma';
  return 'staged';
}

