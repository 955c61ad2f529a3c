// Picks the mover for one tensor: the caller's forced choice, or the measured best ('auto').
// The table comes from bench/movers.ts on host memory (see the numbers beside it); GPU rows are
// to be filled from the GPU runs.
import { Code, GdrpcError } from '../../errors.ts';
import type { Mover, MoverName } from './mover.ts';
import { inlineMover } from './inline.ts';
import { rmaMover } from './rma.ts';
import { tagMover } from './tag.ts';

/** Largest host tensor sent inline by default (bytes). */
export const DEFAULT_INLINE_BYTES = 8192;

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
