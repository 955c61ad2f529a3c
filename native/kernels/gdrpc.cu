// gdrpc's own kernels: what the examples and the GPU tests compute with. Compiled to PTX by
// scripts/build-ptx.sh (nvcc on a GPU machine) into gdrpc.ptx, which is committed and loaded at
// run time by core/compute/kernels.ts. Every kernel has a host twin in core/compute/host.ts that
// gives the same answer (bit for bit for fill, add and checksum; within f32 rounding for gemm).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// A 32-bit mixing function (an avalanche hash): the pattern of fill and the weights of checksum.
__device__ __forceinline__ unsigned int gdrpc_mix(unsigned int x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

__device__ __forceinline__ unsigned int gdrpc_pattern(unsigned long long i, unsigned int seed) {
  return gdrpc_mix(static_cast<unsigned int>(i) ^ gdrpc_mix(static_cast<unsigned int>(i >> 32) ^ seed));
}

extern "C" {

// out[i] = f16(((pattern(i, seed) & 0xffffff) / 2^24 - 0.5) * scale): values in [-scale/2, scale/2).
__global__ void gdrpc_fill_f16(__half* out, unsigned long long n, unsigned int seed, float scale) {
  unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float unit = static_cast<float>(gdrpc_pattern(i, seed) & 0xffffffU) * (1.0f / 16777216.0f);
    out[i] = __float2half_rn(__fmul_rn(__fsub_rn(unit, 0.5f), scale));
  }
}

// The same values as gdrpc_fill_f16, rounded to bf16.
__global__ void gdrpc_fill_bf16(__nv_bfloat16* out, unsigned long long n, unsigned int seed, float scale) {
  unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float unit = static_cast<float>(gdrpc_pattern(i, seed) & 0xffffffU) * (1.0f / 16777216.0f);
    out[i] = __float2bfloat16_rn(__fmul_rn(__fsub_rn(unit, 0.5f), scale));
  }
}

// out[i] = f16(f32(a[i]) + f32(b[i])); out may be a or b.
__global__ void gdrpc_add_f16(__half* out, const __half* a, const __half* b, unsigned long long n) {
  unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = __float2half_rn(__fadd_rn(__half2float(a[i]), __half2float(b[i])));
  }
}

// *sum += sum over 4-byte words w (little endian, the last one zero-padded) of
// mix(w ^ mix(index of w)): order-free, so the answer does not depend on the launch shape.
__global__ void gdrpc_checksum(const unsigned char* data, unsigned long long bytes, unsigned long long* sum) {
  unsigned long long words = (bytes + 3) / 4;
  unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned long long local = 0;
  for (unsigned long long w = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; w < words; w += stride) {
    unsigned int word = 0;
    for (int k = 0; k < 4; ++k) {
      unsigned long long at = w * 4 + k;
      if (at < bytes) word |= static_cast<unsigned int>(data[at]) << (8 * k);
    }
    local += gdrpc_mix(word ^ gdrpc_mix(static_cast<unsigned int>(w)));
  }
  for (int offset = 16; offset > 0; offset /= 2) local += __shfl_down_sync(0xffffffffU, local, offset);
  if ((threadIdx.x & 31) == 0) atomicAdd(sum, local);
}

// Copies `bytes` from src to dst with the threads of one block, 16 bytes per load where both ends
// and the length allow it.
__device__ void gdrpc_copy_span(unsigned char* dst, const unsigned char* src, unsigned long long bytes) {
  const unsigned long long ends = reinterpret_cast<unsigned long long>(dst) | reinterpret_cast<unsigned long long>(src);
  if (((ends | bytes) & 15ULL) == 0) {
    uint4* dst16 = reinterpret_cast<uint4*>(dst);
    const uint4* src16 = reinterpret_cast<const uint4*>(src);
    for (unsigned long long i = threadIdx.x; i < bytes / 16; i += blockDim.x) dst16[i] = src16[i];
  } else {
    for (unsigned long long i = threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
  }
}

// Copies `count` blocks of `bytes` each: block b from table[count + b] to table[b] (device
// addresses), one thread block per copy at a time: the gather and scatter of a batched pull
// (RemoteTensor.pullAll).
__global__ void gdrpc_copy_blocks(const unsigned long long* table, unsigned long long bytes, unsigned int count) {
  for (unsigned int b = blockIdx.x; b < count; b += gridDim.x) {
    gdrpc_copy_span(reinterpret_cast<unsigned char*>(table[b]), reinterpret_cast<const unsigned char*>(table[count + b]), bytes);
  }
}

// Copies `count` blocks by index between two tensors cut into blocks of `blockBytes`: block
// blocks[count + k] of src to block blocks[k] of dst (a block table: RemoteTensor.pullBlocks). A
// block goes in `pieces` pieces of `pieceBytes` (the last one shorter where they do not divide
// it), one thread block per piece at a time. The host writes two u32 per block, not two
// addresses: 4,096 blocks cost a 32 KiB table.
__global__ void gdrpc_copy_indexed(const unsigned int* blocks, unsigned long long dst, unsigned long long src, unsigned long long blockBytes,
                                   unsigned long long pieceBytes, unsigned int count, unsigned int pieces) {
  const unsigned long long entries = static_cast<unsigned long long>(count) * pieces;
  for (unsigned long long e = blockIdx.x; e < entries; e += gridDim.x) {
    const unsigned long long k = e / pieces;
    const unsigned long long start = (e - k * pieces) * pieceBytes;
    const unsigned long long length = min(pieceBytes, blockBytes - start);
    gdrpc_copy_span(reinterpret_cast<unsigned char*>(dst + blocks[k] * blockBytes + start),
                    reinterpret_cast<const unsigned char*>(src + blocks[count + k] * blockBytes + start), length);
  }
}

// Busy-waits on the GPU for `ns` nanoseconds (one thread): a stand-in for a long kernel in tests
// of stream ordering.
__global__ void gdrpc_spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

}  // extern "C"

// C[M, N] = epilogue(A[M, K] x B[K, N]) for row-major f16 A, B, C with f32 accumulation.
// Epilogue, each part optional (null pointer / 0): + bias[N], ReLU, + residual[M, N].
// 256 threads per block; a block computes a (16 * ROWS) x 64 tile, a thread ROWS x 4 outputs.
// (For at most 16 rows, gdrpc_gemm_f16_splitk below does better.)
template <int ROWS>
__device__ __forceinline__ void gdrpc_gemm(const __half* __restrict__ A, const __half* __restrict__ B, __half* C,
                                           const __half* __restrict__ bias, const __half* residual, int M, int N, int K,
                                           int relu) {
  constexpr int BM = 16 * ROWS, BN = 64, BK = 16, THREADS = 256;
  __shared__ float As[BK][BM + 1];
  __shared__ float Bs[BK][BN + 4];
  const int t = threadIdx.x, tx = t % 16, ty = t / 16;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  float acc[ROWS][4];
#pragma unroll
  for (int i = 0; i < ROWS; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int e = t; e < BM * BK; e += THREADS) {
      int r = e / BK, c = e % BK, gr = row0 + r, gk = k0 + c;
      As[c][r] = gr < M && gk < K ? __half2float(A[static_cast<size_t>(gr) * K + gk]) : 0.0f;
    }
    for (int e = t; e < BK * BN; e += THREADS) {
      int r = e / BN, c = e % BN, gk = k0 + r, gc = col0 + c;
      Bs[r][c] = gk < K && gc < N ? __half2float(B[static_cast<size_t>(gk) * N + gc]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[ROWS], b[4];
#pragma unroll
      for (int i = 0; i < ROWS; ++i) a[i] = As[k][ty * ROWS + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[k][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < ROWS; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < ROWS; ++i) {
    int r = row0 + ty * ROWS + i;
    if (r >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      int c = col0 + tx + 16 * j;
      if (c >= N) continue;
      float v = acc[i][j];
      if (bias != nullptr) v += __half2float(bias[c]);
      if (relu) v = fmaxf(v, 0.0f);
      if (residual != nullptr) v += __half2float(residual[static_cast<size_t>(r) * N + c]);
      C[static_cast<size_t>(r) * N + c] = __float2half_rn(v);
    }
  }
}

extern "C" {

// Tiles of 64 rows: for M above 16.
__global__ void __launch_bounds__(256) gdrpc_gemm_f16(const __half* A, const __half* B, __half* C, const __half* bias,
                                                      const __half* residual, int M, int N, int K, int relu) {
  gdrpc_gemm<4>(A, B, C, bias, residual, M, N, K, relu);
}

// Small M (at most 16 rows, a batch of activations against a weight matrix): the product is bound
// by reading B once, so the work is split over K as well as N for enough blocks to keep every SM
// streaming. Each block multiplies a K slice of at most 256 rows of B, 128 columns wide; its 8
// warps take every 8th row of the slice, a lane 4 adjacent columns (one 8-byte load). The sums
// of each slice go to ws[slice][m][n] in f32; gdrpc_gemm_f16_splitk_epilogue adds the slices
// in order (so the result does not depend on scheduling) and applies the epilogue.
__global__ void __launch_bounds__(256) gdrpc_gemm_f16_splitk(const __half* A, const __half* B, float* ws, int M, int N, int K,
                                                             int kslice) {
  constexpr int MAXM = 16, SLICE = 256, COLS = 128, WARPS = 8;
  __shared__ float As[MAXM][SLICE];
  __shared__ float red[WARPS][COLS];
  const int quad = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n0 = blockIdx.x * COLS, c = n0 + quad * 4;
  const int k0 = blockIdx.y * kslice, k1 = min(K, k0 + kslice);
  for (int e = threadIdx.x; e < M * kslice; e += blockDim.x) {
    int m = e / kslice, kk = e % kslice;
    As[m][kk] = k0 + kk < K ? __half2float(A[static_cast<size_t>(m) * K + k0 + kk]) : 0.0f;
  }
  __syncthreads();
  float acc[MAXM][4];
#pragma unroll
  for (int m = 0; m < MAXM; ++m)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[m][j] = 0.0f;
  const bool vec = N % 4 == 0 && (reinterpret_cast<unsigned long long>(B) & 7) == 0;
  for (int k = k0 + warp; k < k1; k += WARPS) {
    const __half* row = B + static_cast<size_t>(k) * N;
    float b[4];
    if (vec && c + 3 < N) {
      uint2 raw = *reinterpret_cast<const uint2*>(row + c);
      float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
      float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
      b[0] = lo.x; b[1] = lo.y; b[2] = hi.x; b[3] = hi.y;
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = c + j < N ? __half2float(row[c + j]) : 0.0f;
    }
#pragma unroll
    for (int m = 0; m < MAXM; ++m) {
      if (m < M) {
        float a = As[m][k - k0];
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[m][j] = fmaf(a, b[j], acc[m][j]);
      }
    }
  }
  // The 8 warps' sums of each row, added through shared memory (M is the same for the whole block).
#pragma unroll
  for (int m = 0; m < MAXM; ++m) {
    if (m < M) {
#pragma unroll
      for (int j = 0; j < 4; ++j) red[warp][quad * 4 + j] = acc[m][j];
      __syncthreads();
      if (threadIdx.x < COLS && n0 + threadIdx.x < N) {
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) sum += red[w][threadIdx.x];
        ws[(static_cast<size_t>(blockIdx.y) * M + m) * N + n0 + threadIdx.x] = sum;
      }
      __syncthreads();
    }
  }
}

// C[m, n] = epilogue(sum over slices s, in order, of ws[s][m][n]).
__global__ void gdrpc_gemm_f16_splitk_epilogue(const float* ws, int slices, __half* C, const __half* bias, const __half* residual,
                                               int M, int N, int relu) {
  const size_t total = static_cast<size_t>(M) * N;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int n = static_cast<int>(i % N);
    float v = 0.0f;
    for (int s = 0; s < slices; ++s) v += ws[static_cast<size_t>(s) * total + i];
    if (bias != nullptr) v += __half2float(bias[n]);
    if (relu) v = fmaxf(v, 0.0f);
    if (residual != nullptr) v += __half2float(residual[i]);
    C[i] = __float2half_rn(v);
  }
}

}  // extern "C"
