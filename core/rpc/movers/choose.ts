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
// copy and a bigger frame above it.
//
// On a 16-core H200 host (bench/rpc-gpu.ts, one GPU, two processes, pooled memory on both sides):
//
//   bytes    host tag     host rma     cuda:0 tag            cuda:0 rma
//   64 KiB   135 us       134 us       105 us                186 us
//   1 MiB    214 us       216 us       109 us (9.6 GB/s)     1497 us
//   16 MiB   1679 us      1699 us      136 us (123 GB/s)     22 ms
//   64 MiB   8.3 ms       6.5 ms       175 us (383 GB/s)     72 ms (0.9 GB/s)
//   (later runs: 64 MiB host tag 6.1 / 7.7 ms, rma 6.4 / 7.0 ms; cuda tag 244 us, rma 74 ms;
//    bench/results/rpc-gpu-h200.jsonl)
//
// Tag rendezvous on GPU memory is cuda_ipc zero-copy (UCX_PROTO_INFO=used); ucp_get on GPU memory
// is not (no cuda_ipc RMA lane in UCX 1.22), so 'auto' never picks RMA for CUDA memory, and
// path.ts reports RMA on GPU memory as staged. On host memory the two are even within run-to-run
// noise at every size, so 'auto' keeps tag there too: no exposure to hold, no FIN round trip.
import { Code, GdrpcError } from '../../errors.ts';
import type { Mover, MoverName } from './mover.ts';
import { inlineMover } from './inline.ts';
import { rmaMover } from './rma.ts';
import { tagMover } from './tag.ts';

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
      throw new GdrpcError(Code.RESOURCE_EXHAUSTED, `inline tensor of ${bytes} bytes exceeds the peer's ${limits.maxFrame}-byte frame limit (its maxFrameBytes): use mover 'auto' or 'tag' for it`,
        { details: { requested: bytes, capacity: limits.maxFrame, limit: 'maxFrameBytes' } });
    }
    return inlineMover;
  }
  if (choice === 'auto') return memory === 'host' && bytes <= limits.inline ? inlineMover : tagMover;
  // CallOptions are checked when a call starts; this guards callers that reach here another way.
  const forced = Object.hasOwn(MOVERS, choice) ? MOVERS[choice] : undefined;
  if (forced === undefined) throw new GdrpcError(Code.INVALID_ARGUMENT, `mover must be one of 'auto', 'inline', 'tag', 'rma', got ${JSON.stringify(choice)}`);
  return forced;
}
