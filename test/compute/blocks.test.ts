// copyBlocks on host memory (the GPU launch and the host<->GPU mix: test/gpu/blocks.test.ts): the
// gather and scatter a batched pull does, bytes checked, and bad input refused before anything is
// copied.
import { describe, expect, it } from 'vitest';
import { Code, copyBlocks, GdrpcError, Tensor } from '../../core/index.ts';
import { blockTable, cutsOf, indexTable, piecesOf, type BlockCopy, type BlockTable } from '../../core/compute/block-layout.ts';
import { BlockCopier, HOST_SLICE_BYTES } from '../../core/compute/blocks.ts';
import { rejection } from '../rpc/fixtures/thrown.ts';

/** `count` host tensors of `bytes` bytes, tensor k filled with bytes k * 7 + i. */
function blocks(count: number, bytes: number): Tensor[] {
  return Array.from({ length: count }, (_, k) => Tensor.fromArray(Uint8Array.from({ length: bytes }, (_, i) => (k * 7 + i) & 0xff)));
}

describe('copyBlocks on the host', () => {
  it('gathers blocks into one tensor and scatters them back out, every byte in place', async () => {
    const parts = blocks(5, 33);
    const stacked = Tensor.zeros([5, 33], 'u8');
    await copyBlocks(33, parts.map((src, k) => ({ dst: stacked, dstOffset: k * 33, src, srcOffset: 0 })));
    for (const [k, part] of parts.entries()) expect(Buffer.compare(stacked.bytes().subarray(k * 33, (k + 1) * 33), part.bytes())).toBe(0);
    const out = Array.from({ length: 5 }, () => Tensor.zeros([33], 'u8'));
    // Scattered in reverse order, to show each block goes where its entry says.
    await copyBlocks(33, out.map((dst, k) => ({ dst, dstOffset: 0, src: stacked, srcOffset: (4 - k) * 33 })));
    for (const [k, tensor] of out.entries()) expect(tensor.equals(parts[4 - k]!)).toBe(true);
  });

  it('cuts long GPU blocks into equal pieces of at most 256 KiB, 16-byte ones where the block is', () => {
    expect(piecesOf(32 << 10)).toBe(1);
    expect(piecesOf(256 << 10)).toBe(1);
    expect(piecesOf(16 << 20)).toBe(64);
    // 262,160 = 16 * 16,385: 2 and 4 pieces would not be multiples of 16, 5 are (52,432 bytes).
    expect(piecesOf((256 << 10) + 16)).toBe(5);
    // 1 MiB + 1 = 17 * 61,681: no 16-byte cut, 17 pieces of 61,681 bytes.
    expect(piecesOf((1 << 20) + 1)).toBe(17);
    // A prime past the table's limit stays one piece.
    expect(piecesOf(2_147_483_647)).toBe(1);
  });

  it('cuts a block without an equal cut into 256 KiB pieces and the tail after them', () => {
    expect(cutsOf(32 << 10)).toEqual([{ bytes: 32 << 10, offsets: [0] }]);
    expect(cutsOf(16 << 20)).toEqual([{ bytes: 256 << 10, offsets: Array.from({ length: 64 }, (_, j) => j * (256 << 10)) }]);
    // 262,147 and 2,097,169 are primes.
    expect(cutsOf(262_147)).toEqual([{ bytes: 262_144, offsets: [0] }, { bytes: 3, offsets: [262_144] }]);
    expect(cutsOf(2_097_169)).toEqual([{ bytes: 262_144, offsets: Array.from({ length: 8 }, (_, j) => j * 262_144) }, { bytes: 17, offsets: [2_097_152] }]);
    // Every cut covers its block exactly once.
    for (const size of [262_147, 2_097_169, (1 << 20) + 1, 3 << 20]) {
      const covered = cutsOf(size).flatMap((group) => group.offsets.map((offset) => [offset, offset + group.bytes] as const)).sort((a, b) => a[0] - b[0]);
      expect(covered[0]![0]).toBe(0);
      for (let k = 1; k < covered.length; k += 1) expect(covered[k]![0]).toBe(covered[k - 1]![1]);
      expect(covered.at(-1)![1]).toBe(size);
    }
  });

  it('copies nothing for no blocks or zero-byte blocks', async () => {
    const dst = Tensor.fromArray(new Uint8Array([1, 2, 3]));
    await copyBlocks(8, []);
    await copyBlocks(0, [{ dst, dstOffset: 3, src: Tensor.zeros([3], 'u8'), srcOffset: 0 }]);
    expect([...dst.bytes()]).toEqual([1, 2, 3]);
  });

  it('refuses blocks outside their tensors, released tensors, non-tensors and bad sizes, copying nothing', async () => {
    const [a, b] = blocks(2, 16);
    const before = Buffer.from(b!.bytes());
    const refused = async (call: Promise<void>): Promise<string> => {
      const error = await rejection(call);
      expect(error.code).toBe(Code.INVALID_ARGUMENT);
      return error.rawMessage;
    };
    // The second entry is bad: the first must not have been copied either.
    expect(await refused(copyBlocks(8, [{ dst: b!, dstOffset: 0, src: a!, srcOffset: 0 }, { dst: b!, dstOffset: 9, src: a!, srcOffset: 0 }]))).toMatch(/copies\[1\]\.dstOffset 9 \+ 8 bytes is outside its 16-byte tensor/);
    expect(await refused(copyBlocks(8, [{ dst: b!, dstOffset: 0, src: a!, srcOffset: -1 }]))).toMatch(/srcOffset -1/);
    expect(await refused(copyBlocks(8, [{ dst: b!, dstOffset: 0.5, src: a!, srcOffset: 0 }]))).toMatch(/dstOffset 0.5/);
    expect(await refused(copyBlocks(-1, []))).toMatch(/blockBytes must be an integer >= 0/);
    expect(await refused(copyBlocks(8, [{ dst: 'x' as unknown as Tensor, dstOffset: 0, src: a!, srcOffset: 0 }]))).toMatch(/copies\[0\]\.dst must be a Tensor/);
    expect(await refused(copyBlocks(8, 'x' as unknown as []))).toMatch(/copies must be an array/);
    expect(await refused(copyBlocks(8, [{ dst: b!, dstOffset: 0, src: { byteLength: 16 } as unknown as Tensor, srcOffset: 0 }]))).toMatch(/copies\[0\]\.src must be a Tensor/);
    const gone = Tensor.zeros([16], 'u8');
    gone.release();
    expect(await refused(copyBlocks(8, [{ dst: b!, dstOffset: 0, src: gone, srcOffset: 0 }]))).toMatch(/copies\[0\]\.src has been released/);
    expect(Buffer.compare(b!.bytes(), before)).toBe(0);
  });
});

describe('block tables (blocks by index between two tensors)', () => {
  /** A host tensor of `count` blocks of `bytes`, block k filled with bytes k * 13 + i. */
  function pool(count: number, bytes: number): Tensor {
    return Tensor.fromArray(Uint8Array.from({ length: count * bytes }, (_, i) => (Math.floor(i / bytes) * 13 + (i % bytes)) & 0xff));
  }
  const blockOf = (tensor: Tensor, k: number, bytes: number): Buffer => Buffer.from(tensor.bytes().subarray(k * bytes, (k + 1) * bytes));

  it('copies block srcBlocks[k] to block dstBlocks[k], either list left out meaning k, every byte in place', async () => {
    const src = pool(8, 24);
    const dst = Tensor.zeros([8 * 24], 'u8');
    await copyBlocks(24, { dst, dstBlocks: Uint32Array.of(7, 0, 3), src, srcBlocks: Uint32Array.of(2, 5, 5), count: 3 });
    expect(blockOf(dst, 7, 24)).toEqual(blockOf(src, 2, 24));
    expect(blockOf(dst, 0, 24)).toEqual(blockOf(src, 5, 24));
    expect(blockOf(dst, 3, 24)).toEqual(blockOf(src, 5, 24));
    for (const untouched of [1, 2, 4, 5, 6]) expect(blockOf(dst, untouched, 24).every((b) => b === 0), `block ${untouched}`).toBe(true);
    const gathered = Tensor.zeros([3 * 24], 'u8');
    await copyBlocks(24, { dst: gathered, src, srcBlocks: Uint32Array.of(6, 1, 4), count: 3 });
    expect([0, 1, 2].map((k) => blockOf(gathered, k, 24))).toEqual([6, 1, 4].map((k) => blockOf(src, k, 24)));
    const scattered = Tensor.zeros([8 * 24], 'u8');
    await copyBlocks(24, { dst: scattered, dstBlocks: Uint32Array.of(4, 2), src: gathered, count: 2 });
    expect([blockOf(scattered, 4, 24), blockOf(scattered, 2, 24)]).toEqual([blockOf(src, 6, 24), blockOf(src, 1, 24)]);
  });

  it('writes the indexed kernel\'s table: destination blocks, then source blocks, k where a list is left out', () => {
    const t = Tensor.zeros([64], 'u8');
    expect([...indexTable({ dst: t, dstBlocks: Uint32Array.of(9, 4), src: t, count: 2 })]).toEqual([9, 4, 0, 1]);
    expect([...indexTable({ dst: t, src: t, srcBlocks: Uint32Array.of(3, 3, 1), count: 3 })]).toEqual([0, 1, 2, 3, 3, 1]);
    expect([...indexTable({ dst: t, src: t, count: 0 })]).toEqual([]);
  });

  it(`copies ${HOST_SLICE_BYTES} bytes of host blocks a turn of the event loop, every byte in place, the table taken as it was`, async () => {
    // 16 MiB of 4 KiB blocks, block 0 over and over then each in turn: four turns.
    const bytes = 4096;
    const src = pool(1024, bytes);
    const count = 4096;
    const srcBlocks = Uint32Array.from({ length: count }, (_, k) => (k < 2048 ? 0 : k % 1024));
    const dst = Tensor.zeros([count * bytes], 'u8');
    // Other work gets turns while it runs (in one go, none would before it resolved).
    let immediates = 0;
    const tick = (): void => { immediates += 1; if (immediates < 1000) setImmediate(tick); };
    setImmediate(tick);
    const copying = copyBlocks(bytes, { dst, src, srcBlocks, count });
    // Changed after copy() returned: the copy is of the table as it was.
    srcBlocks.fill(1);
    await copying;
    expect(immediates).toBeGreaterThanOrEqual(Math.ceil((count * bytes) / HOST_SLICE_BYTES) - 1);
    for (const k of [0, 1, 2047, 2048, 3000, 4095]) expect(blockOf(dst, k, bytes)).toEqual(blockOf(src, k < 2048 ? 0 : k % 1024, bytes));
  });

  it('a host copy over many turns asks its `before` again each turn, and stops when it refuses', async () => {
    // An owner's check that the handle is still exposed: the copy may outlive the exposure.
    const copier = new BlockCopier();
    const bytes = 4096;
    const src = pool(1024, bytes);
    const dst = Tensor.zeros([4096 * bytes], 'u8');
    let asked = 0;
    const before = (): void => {
      asked += 1;
      if (asked === 3) throw new GdrpcError(Code.NOT_FOUND, 'no longer exposed');
    };
    expect(await rejection(copier.copy(bytes, { dst, src, srcBlocks: new Uint32Array(4096), count: 4096 }, { before }))).toMatchObject({ code: Code.NOT_FOUND, message: expect.stringMatching(/no longer exposed/) });
    expect(asked).toBe(3);
    // The first two turns' blocks were copied, the rest not.
    expect(blockOf(dst, 2 * (HOST_SLICE_BYTES / bytes) - 1, bytes)).toEqual(blockOf(src, 0, bytes));
    expect(blockOf(dst, 2 * (HOST_SLICE_BYTES / bytes), bytes).every((b) => b === 0)).toBe(true);
    copier.close();
  });

  it('a host copy over many turns stops, INVALID_ARGUMENT, when a tensor it names is released between them', async () => {
    const bytes = 4096;
    const src = pool(1024, bytes);
    const dst = Tensor.zeros([4096 * bytes], 'u8');
    const copying = copyBlocks(bytes, { dst, src, srcBlocks: new Uint32Array(4096), count: 4096 });
    src.release();
    expect(await rejection(copying)).toMatchObject({ code: Code.INVALID_ARGUMENT, message: expect.stringMatching(/released while they were made/) });
  });

  it('copies nothing for a count of 0 or zero-byte blocks', async () => {
    const dst = Tensor.fromArray(new Uint8Array([1, 2, 3]));
    await copyBlocks(1, { dst, src: Tensor.zeros([3], 'u8'), count: 0 });
    await copyBlocks(0, { dst, src: Tensor.zeros([3], 'u8'), count: 3 });
    expect([...dst.bytes()]).toEqual([1, 2, 3]);
  });

  it('refuses indices outside a tensor, bad lists and counts, non-tensors and released tensors, copying nothing', async () => {
    const src = pool(4, 16);
    const dst = pool(4, 16);
    const before = Buffer.from(dst.bytes());
    const gone = Tensor.zeros([64], 'u8');
    gone.release();
    const cases: Array<[number, unknown, RegExp]> = [
      [16, { dst, src, srcBlocks: Uint32Array.of(0, 4), count: 2 }, /table\.srcBlocks names block 4, outside the 4 blocks of 16 bytes its 64-byte tensor holds/],
      [16, { dst, dstBlocks: Uint32Array.of(1, 2, 9), src, count: 3 }, /table\.dstBlocks names block 9/],
      [16, { dst: Tensor.zeros([32], 'u8'), src, count: 3 }, /table\.dst \(blocks 0 to 2\) names block 2, outside the 2 blocks/],
      [16, { dst, src, srcBlocks: [0, 1], count: 2 }, /table\.srcBlocks must be a Uint32Array of count \(2\) block indices/],
      [16, { dst, src, srcBlocks: Uint32Array.of(0), count: 2 }, /table\.srcBlocks must be a Uint32Array of count \(2\)/],
      [16, { dst, src, count: 1.5 }, /table\.count must be an integer from 0 to 2\^28, got 1\.5/],
      [16, { dst, src }, /table\.count must be an integer/],
      [16, { dst: 'x', src, count: 1 }, /table\.dst must be a Tensor/],
      [16, { dst, src: { byteLength: 64 }, count: 1 }, /table\.src must be a Tensor, got/],
      [16, { dst, src, count: 2 ** 28 + 1 }, /table\.count must be an integer from 0 to 2\^28/],
      [16, { dst, src: gone, count: 1 }, /table\.src has been released/],
      [-1, { dst, src, count: 1 }, /blockBytes must be an integer >= 0/],
      [16, null, /copies must be an array of block copies or a block table, got null/],
    ];
    for (const [bytes, table, message] of cases) {
      const error = await rejection(copyBlocks(bytes, table as BlockTable));
      expect(error.code, String(message)).toBe(Code.INVALID_ARGUMENT);
      expect(error.rawMessage).toMatch(message);
    }
    expect(Buffer.compare(dst.bytes(), before)).toBe(0);
  });
});

describe('copyBlocks input checks', () => {
  it('refuses a missing copy, dst or src in the first copy as in any other (INVALID_ARGUMENT, not a TypeError)', async () => {
    const t = Tensor.zeros([64], 'u8');
    const cases: Array<[unknown[], RegExp]> = [
      [[null], /copies\[0\]\.dst must be a Tensor/],
      [[{ dstOffset: 0, src: t, srcOffset: 0 }], /copies\[0\]\.dst must be a Tensor/],
      [[{ dst: t, dstOffset: 0, srcOffset: 0 }], /copies\[0\]\.src must be a Tensor/],
      [[{ dst: t, dstOffset: 0, src: t, srcOffset: 0 }, { dst: t, dstOffset: 0, srcOffset: 0 }], /copies\[1\]\.src must be a Tensor/],
    ];
    for (const [copies, message] of cases) {
      const error = await rejection(copyBlocks(8, copies as never));
      expect(error.code).toBe(Code.INVALID_ARGUMENT);
      expect(error.message).toMatch(message);
    }
  });
});

describe('the kernel\'s address table (blockTable)', () => {
  /** A stand-in for a GPU tensor at `address` (the table reads only address and byteLength). */
  const at = (address: bigint, byteLength = 1 << 30): Tensor => ({ address, byteLength }) as unknown as Tensor;
  /** The table as u64 entries. */
  const entries = (table: Uint32Array): bigint[] => Array.from(new BigUint64Array(table.buffer, table.byteOffset, table.length / 2));

  it('writes, per group, every piece\'s destination and then its source as u64, for addresses past 2^32', () => {
    const dst = at(0x7f12_3456_7000n);
    const src = at(0x7e00_0000_1000n);
    const other = at(0x3_0000_0000n);
    const copies: BlockCopy[] = [
      { dst, dstOffset: 0, src, srcOffset: 5 * 2_097_169 },
      { dst, dstOffset: 2_097_169, src: other, srcOffset: 0 },
    ];
    const groups = cutsOf(2_097_169);  // 8 pieces of 256 KiB, then a 17-byte tail
    const got = entries(blockTable(groups, copies));
    const expected: bigint[] = [];
    for (const group of groups) {
      for (const c of copies) for (const offset of group.offsets) expected.push(c.dst.address + BigInt(c.dstOffset + offset));
      for (const c of copies) for (const offset of group.offsets) expected.push(c.src.address + BigInt(c.srcOffset + offset));
    }
    expect(got).toEqual(expected);
    expect(got).toHaveLength(2 * 2 * 9);
  });

  it('refuses a tensor whose addresses pass 2^53 rather than write a wrong one', () => {
    const copies: BlockCopy[] = [{ dst: at(1n << 60n), dstOffset: 0, src: at(0x1000n), srcOffset: 0 }];
    expect(() => blockTable(cutsOf(64), copies)).toThrow(/beyond the addresses a block table holds/);
  });
});
