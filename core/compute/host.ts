// The host twins of gdrpc's kernels (native/kernels/gdrpc.cu): the same arithmetic in TypeScript
// on host tensors. fill, add and checksum give the GPU's answer bit for bit (f32 operations are
// rounded with Math.fround where the kernel rounds); gemm accumulates in f64, so it may differ
// from the GPU by f32 rounding in the last bits.
import { fromHalf, toBf16, toHalf, type Tensor } from '../tensor/index.ts';
import { checkAdd, checkFill, checkGemm, checkOn, type GemmOptions, type Kernels } from './contract.ts';

const DEVICE = 'cpu';

/** Kernels that compute on the host, synchronously. */
export function hostKernels(): Kernels {
  let halves: Float64Array | undefined;
  return {
    device: DEVICE,
    stream: undefined,
    fill(out, options) {
      const { seed, scale } = checkFill(out, options, DEVICE);
      const bits = out.toArray() as Uint16Array;
      const s = Math.fround(scale);
      const round = out.dtype === 'bf16' ? toBf16 : toHalf;
      for (let i = 0; i < bits.length; i += 1) {
        const unit = Math.fround((pattern(i, seed) & 0xffffff) / 16777216);
        bits[i] = round(Math.fround(Math.fround(unit - 0.5) * s));
      }
    },
    add(out, a, b) {
      checkAdd(out, a, b, DEVICE);
      const [o, x, y] = [out, a, b].map((t) => t.toArray() as Uint16Array) as [Uint16Array, Uint16Array, Uint16Array];
      for (let i = 0; i < o.length; i += 1) o[i] = toHalf(Math.fround(fromHalf(x[i]!) + fromHalf(y[i]!)));
    },
    gemm(out, a, b, options: GemmOptions = {}) {
      const { m, n, k } = checkGemm(out, a, b, options, DEVICE);
      halves ??= halfTable();
      gemm(out, a, b, options, m, n, k, halves);
    },
    async checksum(tensor: Tensor) {
      checkOn(tensor, 'checksum tensor', DEVICE);
      return checksum(tensor.bytes());
    },
    finished: () => Promise.resolve(),
    close() {},
  };
}

/** The kernels' avalanche hash of a 32-bit value (gdrpc_mix). */
function mix(value: number): number {
  let x = value | 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x7feb352d);
  x ^= x >>> 15;
  x = Math.imul(x, 0x846ca68b);
  x ^= x >>> 16;
  return x >>> 0;
}

/** gdrpc_pattern: the index's low and high 32 bits mixed with the seed. */
function pattern(i: number, seed: number): number {
  const low = i >>> 0;
  const high = Math.floor(i / 2 ** 32);
  return mix((low ^ mix((high ^ seed) >>> 0)) >>> 0);
}

/** Words summed in a float before the sum moves to a bigint: 2^20 words of < 2^32 stay exact. */
const FLUSH_WORDS = 1 << 20;

/** gdrpc_checksum: the sum mod 2^64 of mix(word ^ mix(word index)) over little-endian 4-byte words. */
export function checksum(bytes: Uint8Array): bigint {
  let total = 0n;
  let partial = 0;
  const words = Math.ceil(bytes.length / 4);
  for (let w = 0; w < words; w += 1) {
    const at = w * 4;
    const word = (bytes[at]! | ((bytes[at + 1] ?? 0) << 8) | ((bytes[at + 2] ?? 0) << 16) | ((bytes[at + 3] ?? 0) << 24)) >>> 0;
    partial += mix((word ^ mix(w >>> 0)) >>> 0);
    if ((w + 1) % FLUSH_WORDS === 0) {
      total += BigInt(partial);
      partial = 0;
    }
  }
  return BigInt.asUintN(64, total + BigInt(partial));
}

/** Every f16 value by its bits: reading weights through it is many times faster than decoding
 *  each one. Building it takes about 12 ms, so it is made on a backend's first gemm, not when
 *  gdrpc is imported. */
function halfTable(): Float64Array {
  return Float64Array.from({ length: 65536 }, (_, bits) => fromHalf(bits));
}

function gemm(out: Tensor, a: Tensor, b: Tensor, options: GemmOptions, m: number, n: number, k: number, table: Float64Array): void {
  const [o, x, w] = [out, a, b].map((t) => t.toArray() as Uint16Array) as [Uint16Array, Uint16Array, Uint16Array];
  const bias = options.bias?.toArray() as Uint16Array | undefined;
  const residual = options.residual?.toArray() as Uint16Array | undefined;
  const row = new Float64Array(n);
  for (let r = 0; r < m; r += 1) {
    row.fill(0);
    for (let i = 0; i < k; i += 1) {
      const v = table[x[r * k + i]!]!;
      if (v === 0) continue;
      const base = i * n;
      for (let c = 0; c < n; c += 1) row[c]! += v * table[w[base + c]!]!;
    }
    for (let c = 0; c < n; c += 1) {
      let v = Math.fround(row[c]!);
      if (bias !== undefined) v = Math.fround(v + fromHalf(bias[c]!));
      if (options.relu === true) v = Math.max(v, 0);
      if (residual !== undefined) v = Math.fround(v + fromHalf(residual[r * n + c]!));
      o[r * n + c] = toHalf(v);
    }
  }
}
