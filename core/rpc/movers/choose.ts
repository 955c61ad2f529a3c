// Picks the mover for one tensor: the caller's forced choice, or the measured best ('auto').
// The table comes from `npm run bench -- rpc` (rows mover_*_host, bench/results/rpc.json), host
// memory between two processes on the 2-core CI machine, p50 of one call carrying the tensor:
//
//   bytes    inline   tag     rma          UCX picked sysv/posix shared memory for tag and RMA
//   256      77 us    79 us   139 us       (cma is not reachable in that container), so both
//   4 KiB    77       75      120          copy through bounce buffers; RMA pays one more
//   16 KiB   89       74      122          round trip (FIN) and a rkey unpack per transfer.
//   64 KiB   170      87      128
//   1 MiB    4156     353     422
//
// Inline only wins by skipping a UCX message, which is lost in the noise below 4 KiB and costs a
// copy and a bigger frame above it. GPU rows are to be filled from the GPU runs (until then CUDA
// memory takes the tag path, where UCX chooses cuda_ipc or RDMA itself).
import { Code, GdrpcError } from '../../errors.ts';
import type { Mover, MoverName } from './mover.ts';
import { inlineMover } from './inline.ts';
import { rmaMover } from './rma.ts';
import { tagMover } from './tag.ts';

/** Largest host tensor sent inline by default (bytes). */
export const DEFAULT_INLINE_BYTES = 4096;

const MOVERS: Record<MoverName, Mover> = { inline: inlineMover, tag: tagMover, rma: rmaMover };

/** The mover object of a name. */
export function moverByName(name: MoverName): Mover {
  return MOVERS[name];
}

/** The mover for a tensor of `bytes` in `memory`, given the caller's choice and the frame limit. */
export function chooseMover(choice: 'auto' | MoverName, bytes: number, memory: 'host' | 'cuda', limits: { inline: number; maxFrame: number }): Mover {
  if (bytes === 0) return inlineMover;
  if (choice === 'inline') {
    // 1 KiB of slack for the rest of the frame.
    if (bytes + 1024 > limits.maxFrame) {
      throw new GdrpcError(Code.RESOURCE_EXHAUSTED, `inline tensor of ${bytes} bytes exceeds the peer's ${limits.maxFrame}-byte frame limit`);
    }
    return inlineMover;
  }
  if (choice !== 'auto') return MOVERS[choice];
  if (memory === 'host' && bytes <= limits.inline) return inlineMover;
  // Host memory: tag rendezvous measured faster than RMA pull at every size (one round trip less).
  // CUDA memory: tag as well until GPU measurements say otherwise.
  return tagMover;
}
