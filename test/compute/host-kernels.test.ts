// The host twins of gdrpc's kernels (core/compute/host.ts): what CI runs of the same programs that
// run on GPUs. Each is checked against an independent reference written here; test/gpu/compute
// checks that the GPU kernels give the same answers.
import { describe, expect, it } from 'vitest';
import { Code, fromBf16, fromHalf, hostChecksum, loadKernels, Tensor, toBf16, toHalf } from '../../core/index.ts';
import { thrown } from '../rpc/fixtures/thrown.ts';

const kernels = loadKernels('cpu');
const f16 = (shape: number[], values: number[]): Tensor => Tensor.fromArray(Uint16Array.from(values, toHalf), { shape, dtype: 'f16' });
const numbers = (t: Tensor): number[] => Array.from(t.toArray() as Uint16Array, fromHalf);
const empty = (shape: number[]): Tensor => Tensor.zeros(shape, 'f16');

/** gdrpc_mix with BigInt arithmetic: a second implementation to hold the float one against. */
function mixBig(value: bigint): bigint {
  const m = (x: bigint): bigint => BigInt.asUintN(32, x);
  let x = m(value);
  x ^= x >> 16n; x = m(x * 0x7feb352dn); x ^= x >> 15n; x = m(x * 0x846ca68bn); x ^= x >> 16n;
  return x;
}
function checksumBig(bytes: Uint8Array): bigint {
  let total = 0n;
  for (let w = 0; w * 4 < bytes.length; w += 1) {
    let word = 0n;
    for (let k = 0; k < 4; k += 1) word |= BigInt(bytes[w * 4 + k] ?? 0) << BigInt(8 * k);
    total += mixBig(word ^ mixBig(BigInt(w)));
  }
  return BigInt.asUintN(64, total);
}

describe('host kernels', () => {
  it('fill: a pattern fixed by the seed, inside [-scale/2, scale/2)', () => {
    const [a, b, c] = [empty([1000]), empty([1000]), empty([1000])];
    kernels.fill(a, { seed: 7, scale: 2 });
    kernels.fill(b, { seed: 7, scale: 2 });
    kernels.fill(c, { seed: 8, scale: 2 });
    expect(a.equals(b)).toBe(true);
    expect(a.equals(c)).toBe(false);
    const values = numbers(a);
    expect(Math.min(...values)).toBeGreaterThanOrEqual(-1);
    expect(Math.max(...values)).toBeLessThan(1);
    // Spread over the range, not a constant: the mean is near 0 and both signs occur.
    expect(Math.abs(values.reduce((s, v) => s + v, 0) / values.length)).toBeLessThan(0.1);
    expect(values.filter((v) => v < 0).length).toBeGreaterThan(300);
  });

  it('fill: element i is f16(((mix(i ^ mix(seed)) & 0xffffff) / 2^24 - 0.5) * scale)', () => {
    const t = empty([4]);
    kernels.fill(t, { seed: 3, scale: 1 });
    const expected = [0, 1, 2, 3].map((i) => {
      const h = Number(mixBig(BigInt(i) ^ mixBig(3n)));
      return fromHalf(toHalf((h & 0xffffff) / 2 ** 24 - 0.5));
    });
    expect(numbers(t)).toEqual(expected);
  });

  it('fill bf16: the same values rounded to bf16', () => {
    const [h, b] = [empty([256]), Tensor.zeros([256], 'bf16')];
    kernels.fill(h, { seed: 21, scale: 3 });
    kernels.fill(b, { seed: 21, scale: 3 });
    const halves = numbers(h);
    const bfloats = Array.from(b.toArray() as Uint16Array, fromBf16);
    // bf16 keeps 8 significant bits, f16 11: each is its value's nearest in its format.
    bfloats.forEach((v, i) => expect(Math.abs(v - halves[i]!)).toBeLessThanOrEqual(Math.abs(halves[i]!) * 2 ** -8 + 2 ** -14));
    expect(new Set(bfloats).size).toBeGreaterThan(100);
  });

  it('toBf16 rounds to nearest even on the f32 bits', () => {
    expect(toBf16(1)).toBe(0x3f80);
    expect(toBf16(-2)).toBe(0xc000);
    // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
    expect(toBf16(1 + 2 ** -8)).toBe(0x3f80);
    expect(toBf16(1 + 3 * 2 ** -8)).toBe(0x3f82);
    expect(fromBf16(toBf16(3.140625))).toBe(3.140625);
    expect(Number.isNaN(fromBf16(toBf16(NaN)))).toBe(true);
    expect(fromBf16(toBf16(Infinity))).toBe(Infinity);
  });

  it('add: f16 sums rounded once', () => {
    const out = empty([5]);
    kernels.add(out, f16([5], [1, 2.5, -3, 65504, 0.1]), f16([5], [1, 0.25, 3, 65504, 0.2]));
    expect(numbers(out)).toEqual([2, 2.75, 0, Infinity, fromHalf(toHalf(fromHalf(toHalf(0.1)) + fromHalf(toHalf(0.2))))]);
  });

  it('add: out may be one of its inputs', () => {
    const a = f16([3], [1, 2, 3]);
    kernels.add(a, a, f16([3], [10, 20, 30]));
    expect(numbers(a)).toEqual([11, 22, 33]);
  });

  it.each([
    [1, 1, 1], [3, 5, 7], [17, 1, 33], [8, 64, 16], [2, 130, 65],
  ])('gemm %i x %i x %i against a plain reference, with each epilogue', (m, k, n) => {
    const a = empty([m, k]);
    const b = empty([k, n]);
    const bias = empty([n]);
    const residual = empty([m, n]);
    kernels.fill(a, { seed: 1 });
    kernels.fill(b, { seed: 2 });
    kernels.fill(bias, { seed: 3 });
    kernels.fill(residual, { seed: 4 });
    const [av, bv, biasv, resv] = [a, b, bias, residual].map(numbers) as [number[], number[], number[], number[]];
    for (const options of [{}, { bias, relu: true }, { bias, relu: true, residual }, { residual }]) {
      const out = empty([m, n]);
      kernels.gemm(out, a, b, options);
      const got = numbers(out);
      for (let r = 0; r < m; r += 1) {
        for (let c = 0; c < n; c += 1) {
          let v = 0;
          for (let i = 0; i < k; i += 1) v += av[r * k + i]! * bv[i * n + c]!;
          if ('bias' in options) v += biasv[c]!;
          if ('relu' in options) v = Math.max(0, v);
          if ('residual' in options) v += resv[r * n + c]!;
          // f16 keeps 11 significant bits.
          expect(Math.abs(got[r * n + c]! - v)).toBeLessThanOrEqual(Math.abs(v) * 2 ** -10 + 2 ** -14);
        }
      }
    }
  });

  it('checksum: the documented sum, over sizes that end mid-word and past the float flush', async () => {
    for (const n of [0, 1, 3, 4, 5, 1023, (1 << 22) + 7]) {
      const bytes = new Uint8Array(n);
      for (let i = 0; i < n; i += 1) bytes[i] = (i * 31 + 7) & 0xff;
      const expected = checksumBig(bytes);
      expect(hostChecksum(bytes)).toBe(expected);
      expect(await kernels.checksum(Tensor.fromArray(bytes))).toBe(expected);
    }
  });

  it('checksum: a flipped bit or two swapped words change it', () => {
    const bytes = Uint8Array.from({ length: 64 }, (_, i) => i);
    const base = hostChecksum(bytes);
    const flipped = bytes.slice();
    flipped[40]! ^= 1;
    const swapped = bytes.slice();
    swapped.set(bytes.subarray(0, 4), 4);
    swapped.set(bytes.subarray(4, 8), 0);
    expect(hostChecksum(flipped)).not.toBe(base);
    expect(hostChecksum(swapped)).not.toBe(base);
  });

  it('rejects bad arguments with INVALID_ARGUMENT and names them', () => {
    const a = empty([2, 3]);
    const cases: Array<[() => unknown, RegExp]> = [
      [() => kernels.gemm(empty([2, 2]), a, empty([3, 2]), { bias: empty([3]) }), /bias must have N = 2/],
      [() => kernels.gemm(empty([2, 2]), a, empty([2, 2])), /shapes do not agree/],
      [() => kernels.gemm(empty([2, 2]), a, empty([3, 2]), { residual: empty([2, 3]) }), /residual must be \[2, 2\]/],
      [() => kernels.gemm(empty([2, 2]), a, empty([3, 2]), { relu: 1 as unknown as boolean }), /relu must be a boolean/],
      [() => kernels.add(empty([2]), empty([3]), empty([2])), /as many elements/],
      [() => kernels.add(Tensor.zeros([2], 'f32'), empty([2]), empty([2])), /add out must be f16/],
      [() => kernels.fill(Tensor.zeros([2], 'f32'), { seed: 1 }), /fill out must be f16 or bf16, got f32/],
      [() => kernels.fill(empty([2]), { seed: -1 }), /seed must be an integer/],
      [() => kernels.fill(empty([2]), { seed: 1, scale: NaN }), /scale must be a finite number/],
      [() => kernels.fill({} as Tensor, { seed: 1 }), /fill out must be a Tensor/],
    ];
    for (const [call, message] of cases) {
      const error = thrown(call);
      expect(error.code, String(message)).toBe(Code.INVALID_ARGUMENT);
      expect(error.message).toMatch(message);
    }
  });

  it('rejects a released tensor and a tensor on another device', () => {
    const t = empty([2]);
    t.release();
    expect(thrown(() => kernels.fill(t, { seed: 1 })).message).toMatch(/has been released/);
    expect(thrown(() => loadKernels('cpu', { stream: {} as never })).message).toMatch(/a stream needs a CUDA device/);
  });
});
