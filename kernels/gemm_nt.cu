// bf16 GEMM with the right operand as stored by a Linear's weight ("NT"), bf16 result:
//
//     c[M, N] = bf16(a[M, K] @ b[N, K]^T)
//
// a [M, K] and b [N, K] row-major (b is a Linear's weight, or an LM head's tied embedding
// [vocab, hidden], read as it is: no transpose), c [M, N] row-major. Any M, N, K >= 1.
//
// Numerics: bf16 tensor cores (mma.sync m16n8k16) with f32 accumulation, and one rounding of the
// f32 sum to bf16 (round to nearest even) when c is stored. That is a bf16 model's matmul as IREE
// imports it: accumulated in f32, then narrowed to bf16 by the model's own truncf.
//
// Layout of the work: one block of 8 warps per 128 x 128 tile of c (grid x: the M tile, so that
// consecutive blocks share one tile of b and run through a, grid y: the N tile). The warps form a
// 2 x 4 grid, each owning 64 x 32 of the tile (4 x 4 mma tiles, 64 f32 accumulators per thread).
// K goes in steps of 32: the block stages the 128 x 32 tiles of a and b in shared memory (rows
// padded to 40 elements, 80 bytes: 16-byte aligned, ldmatrix without bank conflicts), double
// buffered: the next step's tiles are loaded (cp.async) while the current ones are multiplied.
// Both tiles are K-contiguous, so ldmatrix without .trans gives the A fragments of a and the
// column-major B fragments of b alike.
//
// Loads: 16-byte cp.async where a (resp. b) is 16-byte aligned and K is a multiple of 8 (every
// row start is then aligned, and an 8-element chunk is wholly inside K or wholly outside);
// chunks past M, N or K are zero-filled (src-size 0). Otherwise (IREE bindings are only
// element-aligned; K odd) element by element, zeros outside. Zeros add nothing to the sums.
// Stores: the accumulator layout gives each thread pairs of adjacent columns of one row; a pair
// is stored as one 4-byte bf16x2 when both columns are inside N and its address is 4-byte
// aligned (with N odd, every other row's pairs are not), else element by element; rows past M
// and columns past N are not stored.

#include <cstdint>
#include <cuda_bf16.h>

#include "mma_bf16.cuh"

namespace gemm_nt {

constexpr int BM = 128;
constexpr int BN = 128;
constexpr int BK = 32;
constexpr int PITCH = 40;  // shared-memory row pitch in elements (80 bytes)
constexpr int THREADS = 256;

using namespace mma_bf16;  // bf16, smem, ldmatrix, mma

// 16 bytes from global to shared, or 16 zero bytes when !valid (src-size 0: nothing is read).
__device__ __forceinline__ void cp_async16(bf16* dst, const bf16* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// tile[r][c] = src[(r0 + r) * K + k0 + c] for r0 + r < rows, k0 + c < K; 0 elsewhere.
// 128 x 32 elements: 512 chunks of 8, two per thread.
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* src, int r0, int rows, int k0, int K, bool vec) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int i = threadIdx.x + j * THREADS;
    const int r = i >> 2, c = (i & 3) * 8;
    bf16* dst = tile + r * PITCH + c;
    const bool row_in = r0 + r < rows;
    const long off = static_cast<long>(r0 + r) * K + k0 + c;
    if (vec) {  // K % 8 == 0: the chunk is wholly inside K or outside
      const bool in = row_in && k0 + c < K;
      cp_async16(dst, in ? src + off : src, in);
    } else {
      const bf16 zero = __float2bfloat16(0.0f);
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = (row_in && k0 + c + e < K) ? src[off + e] : zero;
    }
  }
}

// c[row, col] and c[row, col + 1] (when inside M and N), rounded to bf16.
__device__ __forceinline__ void store_pair(bf16* c, int M, int N, int row, int col, float v0, float v1) {
  if (row >= M || col >= N) return;
  bf16* p = c + static_cast<long>(row) * N + col;
  if (col + 1 < N && (reinterpret_cast<uintptr_t>(p) & 3) == 0) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);  // .x (low address) = v0
  } else {
    p[0] = __float2bfloat16_rn(v0);
    if (col + 1 < N) p[1] = __float2bfloat16_rn(v1);
  }
}

}  // namespace gemm_nt

extern "C" __global__ void __launch_bounds__(256) gemm_nt_bf16(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b,
                                                               __nv_bfloat16* __restrict__ c, int M, int N, int K) {
  using namespace gemm_nt;
  __shared__ __align__(16) bf16 sA[2][BM * PITCH];
  __shared__ __align__(16) bf16 sB[2][BN * PITCH];

  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  if (m0 >= M || n0 >= N) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = (warp & 1) * 64, wn = (warp >> 1) * 32;  // this warp's 64 x 32 of the tile
  const int g = lane >> 2, q = lane & 3;
  const bool vec_a = aligned16(a) && (K & 7) == 0;
  const bool vec_b = aligned16(b) && (K & 7) == 0;

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

  // ldmatrix row addresses of this lane. A (x4): matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7),
  // (rows 0-7, k 8-15), (rows 8-15, k 8-15) = a0..a3 of m16n8k16. B (x4) over 16 columns of c:
  // matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) = b0, b1 of the
  // first n8 tile, then of the second.
  const int a_row = wm + (lane & 15), a_col = (lane >> 4) * 8;
  const int b_row = wn + ((lane >> 4) << 3) + (lane & 7), b_col = ((lane >> 3) & 1) * 8;

  const int k_tiles = (K + BK - 1) / BK;
  load_tile(sA[0], a, m0, M, 0, K, vec_a);
  load_tile(sB[0], b, n0, N, 0, K, vec_b);
  cp_async_commit();
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int s = kt & 1;
    if (kt + 1 < k_tiles) {  // the other stage was last read in step kt - 1, before its closing barrier
      load_tile(sA[s ^ 1], a, m0, M, (kt + 1) * BK, K, vec_a);
      load_tile(sB[s ^ 1], b, n0, N, (kt + 1) * BK, K, vec_b);
      cp_async_commit();
      cp_async_wait<1>();  // this step's group has landed, the next one may still be in flight
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* tA = sA[s];
    const bf16* tB = sB[s];
#pragma unroll
    for (int ks = 0; ks < BK; ks += 16) {
      unsigned af[4][4], bfr[2][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) ldsm_x4(af[i], tA + (a_row + i * 16) * PITCH + ks + a_col);
#pragma unroll
      for (int j = 0; j < 2; ++j) ldsm_x4(bfr[j], tB + (b_row + j * 16) * PITCH + ks + b_col);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) mma(acc[i][j], af[i], bfr[j >> 1][(j & 1) * 2], bfr[j >> 1][(j & 1) * 2 + 1]);
    }
    __syncthreads();  // every warp is done with stage s before step kt + 1 loads into it
  }

  // Accumulator (i, j): rows m0 + wm + 16 i + g (elements 0, 1) and + 8 (2, 3), columns
  // n0 + wn + 8 j + 2 q and + 1.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = m0 + wm + i * 16 + g;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = n0 + wn + j * 8 + 2 * q;
      store_pair(c, M, N, row, col, acc[i][j][0], acc[i][j][1]);
      store_pair(c, M, N, row + 8, col, acc[i][j][2], acc[i][j][3]);
    }
  }
}
