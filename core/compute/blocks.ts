// Many equal-sized block copies between tensors as one step: the gather of a batched pull on the
// owner and its scatter on the puller (RemoteTensor.pullAll, gdrpc.Owner/pullStacked), and block
// tables between two tensors (RemoteTensor.pullBlocks). Blocks all on one GPU go in one launch of
// gdrpc_copy_blocks (a list of copies) or gdrpc_copy_indexed (a block table); host blocks are
// copied in place; any other mix (two GPUs, host and GPU) goes block by block through cuMemcpy.
import { cuda } from '../cuda.ts';
import { Code, GdrpcError } from '../errors.ts';
import { Tensor } from '../tensor/index.ts';
import { describe, invalid } from '../ucx/check.ts';
import { blockTable, cutsOf, indexTable, MAX_PIECE_BYTES, type BlockCopies, type BlockCopy, type BlockTable } from './block-layout.ts';
import { readKernelsPtx } from './kernels.ts';
import { CudaModule, type CudaKernel } from './module.ts';
import { producerOf, ProducerSync } from './ready.ts';
import { CudaEvent, CudaStream } from './stream.ts';

export type { BlockCopies, BlockCopy, BlockTable } from './block-layout.ts';

const THREADS = 256;
/** Bytes of host blocks copied in one turn of the event loop: a pullBlocks of 64 MiB gathered in
 *  one go held an owner's loop 61 ms (16,384 repeats of one 4 KiB block, a helper session's
 *  attack, 2026-12-06), with every other call waiting. */
export const HOST_SLICE_BYTES = 4 << 20;
const MAX_GRID = 65535;
/** Most blocks a block table names (its index table is 8 bytes a block: 2 GiB at most). */
const MAX_TABLE_BLOCKS = 2 ** 28;
/** What one GPU keeps for block copies: the kernel, a stream, the address table, and a queue so
 *  that one copy at a time fills the table. */
interface GpuCopier { module: CudaModule; kernel: CudaKernel; indexed: CudaKernel; stream: CudaStream; table: { ptr: bigint; bytes: number } | undefined; queue: Promise<void> }

/** Block copies with what they keep per GPU (the loaded kernel, a stream, an address table): a
 *  Runtime holds one for the pulls it serves and makes (runtime.blocks), closed with it. */
export class BlockCopier {
  readonly #gpus = new Map<number, GpuCopier>();
  #closed = false;

  /** Copies every block of `copies` (each `blockBytes` long); resolves when all are in place.
   *  Sources a producer stream was named for (producedOn, readyAfter) are waited for on the GPU;
   *  other GPU sources are complete once the device is synchronized, as a send would do, unless
   *  the caller vouches that their bytes are complete already (`sourcesReady`: a tensor UCX has
   *  finished receiving, or one synchronized when it was exposed). That device-wide
   *  synchronize also waits for every other copy and transfer on the device: pulls that gather
   *  and scatter batches side by side would queue behind each other's transfers. `before` runs
   *  right before the copy starts, after any wait for its turn on the GPU, and refuses the copy
   *  by throwing (an owner checks there that a gather's handles are still exposed); a tensor
   *  released while the copy waited refuses it too (INVALID_ARGUMENT). */
  async copy(blockBytes: number, copies: BlockCopies, options: { sourcesReady?: boolean; before?: () => void } = {}): Promise<void> {
    const list = Array.isArray(copies) ? copies as readonly BlockCopy[] : undefined;
    const table = list === undefined ? checkTable(blockBytes, copies as BlockTable) : undefined;
    if (list !== undefined) checkCopies(blockBytes, list);
    if ((list?.length ?? table!.count) === 0 || blockBytes === 0) return;
    const before = options.before;
    // A block table names one or two tensors thousands of times: what is asked of a tensor is
    // asked once.
    const tensors = list !== undefined ? tensorsOf(list) : [...new Set([table!.dst, table!.src])];
    const tableDst = table?.dst;
    if (tensors.every((tensor) => tensor.device === 'cpu')) {
      await copyOnHost(blockBytes, list !== undefined ? listSlices(blockBytes, list) : tableSlices(blockBytes, table!), tensors, before);
      return;
    }
    const device = oneGpu(tensors);
    const sourcesReady = options.sourcesReady === true;
    if (device === undefined) {
      before?.();
      copyEach(blockBytes, list ?? copiesOf(blockBytes, table!), sourcesReady);
      return;
    }
    if (this.#closed) throw new GdrpcError(Code.FAILED_PRECONDITION, 'the block copier is closed');
    const gpu = this.#gpu(device);
    // What the kernel will read is taken now, as it was checked: the caller may change or reuse
    // its list or table as soon as copy() has returned, before the copy's turn comes.
    const plan = list !== undefined ? listLaunch(blockBytes, list) : tableLaunch(blockBytes, table!);
    // Queued behind other copies on this GPU: the tensors are checked again when the turn comes
    // (one may have been released meanwhile), and so is whatever the caller checks (`before`).
    const turn = gpu.queue.then(() => {
      before?.();
      if (tensors.some((tensor) => tensor.released)) {
        // (Which entry, for the message: the list as it is now, since a tensor, not an entry, went.)
        const at = list?.findIndex((c) => c.dst?.released === true || c.src?.released === true) ?? -1;
        const gone = list === undefined ? `the table's ${tableDst!.released ? 'dst' : 'src'} was` : at >= 0 ? `copies[${at}] names a tensor` : 'a tensor of the copies was';
        throw invalid(`copyBlocks: ${gone} released while the copy waited its turn`);
      }
      return launch(gpu, device, plan, sourcesReady);
    });
    gpu.queue = turn.catch(() => undefined);
    await turn;
  }

  /** Frees what it keeps per GPU once the copies queued there are done; later GPU copies fail. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const gpu of this.#gpus.values()) {
      void gpu.queue.then(() => {
        if (gpu.table !== undefined) cuda.free(gpu.table.ptr);
        gpu.stream.close();
        gpu.module.close();
      });
    }
    this.#gpus.clear();
  }

  #gpu(device: number): GpuCopier {
    let found = this.#gpus.get(device);
    if (found === undefined) {
      const module = CudaModule.load(device, readKernelsPtx());
      found = {
        module,
        kernel: module.kernel('gdrpc_copy_blocks', ['ptr', 'u64', 'u32']),
        indexed: module.kernel('gdrpc_copy_indexed', ['ptr', 'u64', 'u64', 'u64', 'u64', 'u32', 'u32']),
        stream: CudaStream.create(device),
        table: undefined,
        queue: Promise.resolve(),
      };
      this.#gpus.set(device, found);
    }
    return found;
  }
}

/** Copies every block of `copies` once, with a BlockCopier of its own (on a GPU that loads the
 *  kernel for this call: keep a BlockCopier for repeated copies). */
export async function copyBlocks(blockBytes: number, copies: BlockCopies): Promise<void> {
  const copier = new BlockCopier();
  try {
    await copier.copy(blockBytes, copies);
  } finally {
    copier.close();
  }
}

const NONE = Symbol('none');

function checkBlockBytes(blockBytes: number): void {
  if (!Number.isSafeInteger(blockBytes) || blockBytes < 0) throw invalid(`copyBlocks: blockBytes must be an integer >= 0, got ${describe(blockBytes)}`);
}

function checkCopies(blockBytes: number, copies: readonly BlockCopy[]): void {
  checkBlockBytes(blockBytes);
  if (copies.length > 0xffffffff) throw invalid('copyBlocks: copies must be an array of at most 2^32 - 1 blocks');
  // A tensor checked for the copy before is not checked again; every offset is. (NONE: nothing
  // checked yet, so that a missing tensor in the first copy is checked as one.)
  let dst: unknown = NONE;
  let src: unknown = NONE;
  for (let k = 0; k < copies.length; k += 1) {
    const c = copies[k] as BlockCopy | undefined;
    checkSide(k, 'dst', c?.dst, c?.dstOffset, blockBytes, c?.dst === dst);
    checkSide(k, 'src', c?.src, c?.srcOffset, blockBytes, c?.src === src);
    dst = c?.dst;
    src = c?.src;
  }
}

function checkSide(k: number, side: 'dst' | 'src', tensor: Tensor | undefined, offset: number | undefined, blockBytes: number, checked: boolean): void {
  if (!checked) {
    if (!(tensor instanceof Tensor)) throw invalid(`copyBlocks: copies[${k}].${side} must be a Tensor, got ${describe(tensor)}`);
    if (tensor.released) throw invalid(`copyBlocks: copies[${k}].${side} has been released`);
  }
  if (!Number.isSafeInteger(offset) || offset! < 0 || offset! + blockBytes > tensor!.byteLength) {
    throw invalid(`copyBlocks: copies[${k}].${side}Offset ${describe(offset)} + ${blockBytes} bytes is outside its ${tensor!.byteLength}-byte tensor`);
  }
}

/** Checks a block table before anything is copied; returns it. */
function checkTable(blockBytes: number, table: BlockTable): BlockTable {
  if (typeof table !== 'object' || table === null) throw invalid(`copyBlocks: copies must be an array of block copies or a block table, got ${describe(table)}`);
  checkBlockBytes(blockBytes);
  const { count } = table;
  if (!Number.isSafeInteger(count) || count < 0 || count > MAX_TABLE_BLOCKS) throw invalid(`copyBlocks: table.count must be an integer from 0 to 2^28, got ${describe(count)}`);
  checkTableSide('dst', table.dst, table.dstBlocks, count, blockBytes);
  checkTableSide('src', table.src, table.srcBlocks, count, blockBytes);
  return table;
}

function checkTableSide(side: 'dst' | 'src', tensor: Tensor, blocks: Uint32Array | undefined, count: number, blockBytes: number): void {
  if (!(tensor instanceof Tensor)) throw invalid(`copyBlocks: table.${side} must be a Tensor, got ${describe(tensor)}`);
  if (tensor.released) throw invalid(`copyBlocks: table.${side} has been released`);
  if (blocks !== undefined && !(blocks instanceof Uint32Array && blocks.length === count)) {
    throw invalid(`copyBlocks: table.${side}Blocks must be a Uint32Array of count (${count}) block indices, got ${describe(blocks)}`);
  }
  if (count === 0 || blockBytes === 0) return;
  let top = count - 1;
  if (blocks !== undefined) {
    top = 0;
    for (let k = 0; k < count; k += 1) if (blocks[k]! > top) top = blocks[k]!;
  }
  const held = Math.floor(tensor.byteLength / blockBytes);
  if (top >= held) throw invalid(`copyBlocks: table.${side}${blocks === undefined ? ` (blocks 0 to ${count - 1})` : 'Blocks'} names block ${top}, outside the ${held} blocks of ${blockBytes} bytes its ${tensor.byteLength}-byte tensor holds`);
}

/** Host blocks copied in place, HOST_SLICE_BYTES a turn of the event loop: `slices` copies one
 *  turn's blocks at a time, and says whether more are left. Before each turn `before` runs (an
 *  owner checks there that the handle is still exposed: a copy over many turns may outlive the
 *  exposure) and the tensors are checked (one released stops the copy, INVALID_ARGUMENT). */
async function copyOnHost(blockBytes: number, slices: () => boolean, tensors: readonly Tensor[], before: (() => void) | undefined): Promise<void> {
  for (let turn = 0; ; turn += 1) {
    if (turn > 0) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      if (tensors.some((tensor) => tensor.released)) throw invalid('copyBlocks: a tensor of the copies was released while they were made');
    }
    before?.();
    if (!slices()) return;
  }
}

/** Blocks a turn of host copying. */
const blocksPerTurn = (blockBytes: number): number => Math.max(1, Math.floor(HOST_SLICE_BYTES / Math.max(1, blockBytes)));

/** A list of host copies, a turn's worth at a time; taken as it is now (the caller may change its
 *  list once copy() returned). */
function listSlices(blockBytes: number, list: readonly BlockCopy[]): () => boolean {
  const perTurn = blocksPerTurn(blockBytes);
  const plan = list.length > perTurn ? list.map((c) => ({ ...c })) : list;
  let next = 0;
  return () => {
    // A list names few tensors, many times: their views are taken once a turn.
    let dst: Tensor | undefined;
    let src: Tensor | undefined;
    let to: Uint8Array = new Uint8Array(0);
    let from: Uint8Array = to;
    const end = Math.min(plan.length, next + perTurn);
    for (; next < end; next += 1) {
      const c = plan[next]!;
      if (c.dst !== dst) to = (dst = c.dst).bytes();
      if (c.src !== src) from = (src = c.src).bytes();
      to.set(from.subarray(c.srcOffset, c.srcOffset + blockBytes), c.dstOffset);
    }
    return next < plan.length;
  };
}

/** A block table's host blocks, a turn's worth at a time; its index lists taken as they are now. */
function tableSlices(blockBytes: number, table: BlockTable): () => boolean {
  const perTurn = blocksPerTurn(blockBytes);
  const several = table.count > perTurn;
  const srcBlocks = several ? table.srcBlocks?.slice(0, table.count) : table.srcBlocks;
  const dstBlocks = several ? table.dstBlocks?.slice(0, table.count) : table.dstBlocks;
  let next = 0;
  return () => {
    const to = table.dst.bytes();
    const from = table.src.bytes();
    const end = Math.min(table.count, next + perTurn);
    for (; next < end; next += 1) {
      const at = (srcBlocks?.[next] ?? next) * blockBytes;
      to.set(from.subarray(at, at + blockBytes), (dstBlocks?.[next] ?? next) * blockBytes);
    }
    return next < table.count;
  };
}

/** A block table as a list of copies (the cuMemcpy-per-block path of mixed devices). */
function copiesOf(blockBytes: number, table: BlockTable): BlockCopy[] {
  const { dst, src, dstBlocks, srcBlocks } = table;
  return Array.from({ length: table.count }, (_, k) => ({ dst, dstOffset: (dstBlocks?.[k] ?? k) * blockBytes, src, srcOffset: (srcBlocks?.[k] ?? k) * blockBytes }));
}

/** The tensors `copies` read, each once. */
function sourcesOf(copies: readonly BlockCopy[]): Set<Tensor> {
  const seen = new Set<Tensor>();
  let src: Tensor | undefined;
  for (let k = 0; k < copies.length; k += 1) if (copies[k]!.src !== src) seen.add(src = copies[k]!.src);
  return seen;
}

/** The tensors `copies` name, each once. */
function tensorsOf(copies: readonly BlockCopy[]): Tensor[] {
  const seen = new Set<Tensor>();
  let dst: Tensor | undefined;
  let src: Tensor | undefined;
  for (let k = 0; k < copies.length; k += 1) {
    const c = copies[k]!;
    if (c.dst !== dst) seen.add(dst = c.dst);
    if (c.src !== src) seen.add(src = c.src);
  }
  return [...seen];
}

/** The CUDA device every tensor of a copy is on, or undefined when they are not all on one. */
function oneGpu(tensors: readonly Tensor[]): number | undefined {
  const device = tensors[0]!.device;
  if (device === 'cpu' || !tensors.every((tensor) => tensor.device === device)) return undefined;
  return Number(device.slice('cuda:'.length));
}

/** Host and GPU mixed (or two GPUs): cuMemcpy per block, once the sources' producers are done. */
function copyEach(blockBytes: number, copies: readonly BlockCopy[], sourcesReady: boolean): void {
  if (!sourcesReady) {
    const sync = new ProducerSync();
    for (const src of sourcesOf(copies)) sync.before(src);
  }
  for (const c of copies) cuda.copy(place(c.dst, c.dstOffset, blockBytes), place(c.src, c.srcOffset, blockBytes), blockBytes);
}

/** What one copy launches when its turn comes, taken when it was checked: the kernel's table, the
 *  sources to wait for, and the launches themselves (each reports that it started). */
interface LaunchPlan { words: Uint32Array; sources: Iterable<Tensor>; start(gpu: GpuCopier, table: bigint, started: () => void): void }

/** A list of copies: one launch of gdrpc_copy_blocks per group of pieces (cutsOf: long blocks
 *  are cut so that every thread block has a share). */
function listLaunch(blockBytes: number, list: readonly BlockCopy[]): LaunchPlan {
  const groups = cutsOf(blockBytes);
  const count = list.length;
  return {
    words: blockTable(groups, list),
    sources: sourcesOf(list),
    start: (gpu, table, started) => {
      let at = 0;
      for (const group of groups) {
        const n = count * group.offsets.length;
        gpu.kernel.launch({ grid: Math.min(n, MAX_GRID), block: THREADS, stream: gpu.stream }, table + BigInt(at * 8), BigInt(group.bytes), n);
        started();
        at += 2 * n;
      }
    },
  };
}

/** A block table: one launch of gdrpc_copy_indexed, blocks cut into pieces of at most
 *  MAX_PIECE_BYTES (the last one shorter) so that every thread block has a share. */
function tableLaunch(blockBytes: number, table: BlockTable): LaunchPlan {
  const { dst, src, count } = table;
  const pieceBytes = Math.min(blockBytes, MAX_PIECE_BYTES);
  const pieces = Math.ceil(blockBytes / pieceBytes);
  return {
    words: indexTable(table),
    sources: [src],
    start: (gpu, words, started) => {
      gpu.indexed.launch({ grid: Math.min(count * pieces, MAX_GRID), block: THREADS, stream: gpu.stream },
        words, dst.address, src.address, BigInt(blockBytes), BigInt(pieceBytes), count, pieces);
      started();
    },
  };
}

/** `plan` on `device`, after the last copy of this GPU finished with the table. */
async function launch(gpu: GpuCopier, device: number, plan: LaunchPlan, sourcesReady: boolean): Promise<void> {
  const tableBytes = plan.words.byteLength;
  if (gpu.table === undefined || gpu.table.bytes < tableBytes) {
    if (gpu.table !== undefined) cuda.free(gpu.table.ptr);
    gpu.table = undefined;
    const bytes = Math.max(tableBytes, 16 * 1024);
    gpu.table = { ptr: cuda.alloc(device, bytes), bytes };
  }
  let synchronized = sourcesReady;
  for (const source of plan.sources) {
    const producer = producerOf(source);
    if (producer !== undefined) gpu.stream.waitFor(producer);
    else if (!synchronized) {
      cuda.synchronize(device);
      synchronized = true;
    }
  }
  cuda.copy(gpu.table.ptr, plan.words, tableBytes);
  let launched = false;
  let done: CudaEvent;
  try {
    plan.start(gpu, gpu.table.ptr, () => { launched = true; });
    done = CudaEvent.create(device).record(gpu.stream);
  } catch (error) {
    // A launch that did start reads and writes until it ends: the caller may release or unmap the
    // memory once this throws, so it ends first.
    if (launched) {
      try {
        gpu.stream.synchronize();
      } catch {
        // the error that stopped the launch is the one to report
      }
    }
    throw error;
  }
  try {
    await done.finished();
  } finally {
    done.close();
  }
}

/** Where a block of `tensor` starts, as cuda.copy takes it: a device pointer or a host view. */
function place(tensor: Tensor, offset: number, bytes: number): bigint | Uint8Array {
  return tensor.device === 'cpu' ? tensor.bytes().subarray(offset, offset + bytes) : tensor.address + BigInt(offset);
}
