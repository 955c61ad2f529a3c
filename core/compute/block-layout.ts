// What gdrpc's block-copy kernels read (native/kernels/gdrpc.cu): a list of copies as an address
// table for gdrpc_copy_blocks, with long blocks cut into pieces so that every thread block has a
// share, and a block table as the index table of gdrpc_copy_indexed. BlockCopier (blocks.ts)
// checks what it is given and launches them.
import type { Tensor } from '../tensor/index.ts';
import { invalid } from '../ucx/check.ts';

/** One block: `blockBytes` from `src` at `srcOffset` to `dst` at `dstOffset`. */
export interface BlockCopy { dst: Tensor; dstOffset: number; src: Tensor; srcOffset: number }

/** A block table between two tensors cut into blocks of `blockBytes`: block `srcBlocks[k]` of
 *  `src` to block `dstBlocks[k]` of `dst` for every k below `count` (a list left out: block k).
 *  The indices go to the GPU as they are (gdrpc_copy_indexed): no object and no address per block
 *  on the host. */
export interface BlockTable { dst: Tensor; dstBlocks?: Uint32Array; src: Tensor; srcBlocks?: Uint32Array; count: number }

/** What BlockCopier.copy takes: a list of block copies, or a block table between two tensors. */
export type BlockCopies = readonly BlockCopy[] | BlockTable;

/** Longest piece one thread block of the kernel copies: a longer block is cut into equal pieces
 *  (a 16 MiB block as one entry would be copied by one thread block, at a few GB/s). */
export const MAX_PIECE_BYTES = 256 << 10;
/** Most pieces a block is cut into (beyond that the table itself would cost). */
const MAX_PIECES = 4096;

/** How many equal pieces a block of `blockBytes` is copied as: the fewest that are each at most
 *  MAX_PIECE_BYTES, divide the block exactly, and keep 16-byte pieces when the block is a multiple
 *  of 16 (the kernel's wide path); 1 when no such cut exists (cutsOf then adds a tail). */
export function piecesOf(blockBytes: number): number {
  if (blockBytes <= MAX_PIECE_BYTES) return 1;
  const wide = blockBytes % 16 === 0;
  for (let pieces = Math.ceil(blockBytes / MAX_PIECE_BYTES); pieces <= MAX_PIECES; pieces += 1) {
    if (blockBytes % pieces !== 0) continue;
    if (!wide || (blockBytes / pieces) % 16 === 0) return pieces;
  }
  return 1;
}

/** The pieces one block is copied as, in groups of one length (one kernel launch each): equal
 *  pieces where piecesOf finds a cut, else pieces of MAX_PIECE_BYTES and the tail after them. */
export function cutsOf(blockBytes: number): Array<{ bytes: number; offsets: number[] }> {
  const pieces = piecesOf(blockBytes);
  if (pieces > 1 || blockBytes <= MAX_PIECE_BYTES) {
    const bytes = blockBytes / pieces;
    return [{ bytes, offsets: Array.from({ length: pieces }, (_, j) => j * bytes) }];
  }
  const full = Math.floor(blockBytes / MAX_PIECE_BYTES);
  return [
    { bytes: MAX_PIECE_BYTES, offsets: Array.from({ length: full }, (_, j) => j * MAX_PIECE_BYTES) },
    { bytes: blockBytes - full * MAX_PIECE_BYTES, offsets: [full * MAX_PIECE_BYTES] },
  ];
}

const TWO_32 = 2 ** 32;

/** The kernel's address table for `copies` cut into `groups` (cutsOf): per group, the
 *  destination of every piece, then their sources, each a little-endian u64 written as two u32
 *  words. Addresses are added as numbers (device and host addresses lie far below 2^53). */
export function blockTable(groups: ReadonlyArray<{ bytes: number; offsets: readonly number[] }>, copies: readonly BlockCopy[]): Uint32Array {
  const entries = groups.reduce((n, group) => n + copies.length * group.offsets.length, 0);
  const table = new Uint32Array(entries * 4);
  const bases = new Map<Tensor, number>();
  const baseOf = (tensor: Tensor): number => {
    let base = bases.get(tensor);
    if (base === undefined) {
      const address = tensor.address;
      if (address > BigInt(Number.MAX_SAFE_INTEGER) - BigInt(tensor.byteLength)) throw invalid(`copyBlocks: a tensor at 0x${address.toString(16)} lies beyond the addresses a block table holds`);
      base = Number(address);
      bases.set(tensor, base);
    }
    return base;
  };
  const put = (entry: number, value: number): void => {
    table[2 * entry] = value % TWO_32;
    table[2 * entry + 1] = Math.floor(value / TWO_32);
  };
  let at = 0;
  for (const group of groups) {
    const per = group.offsets.length;
    const n = copies.length * per;
    for (let k = 0; k < copies.length; k += 1) {
      const c = copies[k]!;
      const dst = baseOf(c.dst) + c.dstOffset;
      const src = baseOf(c.src) + c.srcOffset;
      for (let j = 0; j < per; j += 1) {
        put(at + k * per + j, dst + group.offsets[j]!);
        put(at + n + k * per + j, src + group.offsets[j]!);
      }
    }
    at += 2 * n;
  }
  return table;
}

/** The indexed kernel's table: the destination block of every copy, then its source block. */
export function indexTable(table: BlockTable): Uint32Array {
  const { count } = table;
  const words = new Uint32Array(2 * count);
  if (table.dstBlocks !== undefined) words.set(table.dstBlocks);
  else for (let k = 0; k < count; k += 1) words[k] = k;
  if (table.srcBlocks !== undefined) words.set(table.srcBlocks, count);
  else for (let k = 0; k < count; k += 1) words[count + k] = k;
  return words;
}
