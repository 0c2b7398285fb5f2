// f32 GEMMs on CUDA cores (FFMA; no tensor cores, no TF32), so that an f32 model keeps its own
// numerics: f32 inputs, f32 products fused into f32 sums (fmaf), one f32 result per element.
//   gemm_f32:    c[M, N] = a[M, K] @ b[K, N]     (all row-major)
//   gemm_nt_f32: c[M, N] = a[M, K] @ b[N, K]^T   (b as a Linear stores its weight, or an LM head
//                                                  its tied embedding [vocab, hidden])
//   gemm_nt_bias_f32, gemm_nt_bias_gelu_erf_f32, gemm_nt_bias_residual_f32: gemm_nt_f32 with a
//   Linear's bias added, then erf-GELU or a residual, in the epilogue (see Epilogues below)
// Any M, N, K >= 1. Design and numerics: docs/gemm_f32.md.
//
// Both bodies compute a BM x 128 tile of c with 256 threads, each a (BM / 16) x 8 micro-tile held
// in registers: rows ty*4 + {0..3} and 64 + ty*R + {0..R-1} (R = (BM - 64) / 16: 4 at BM = 128, 2
// at BM = 96), columns tx*4 + {0..3} and 64 + tx*4 + {0..3} (16 x 16 threads), so that every
// shared-memory read of the inner loop is a float4 (a float2 for BM = 96's second rows) and a
// warp's reads of one k row of B cover 256 contiguous bytes. A and B tiles are kept k-major in
// shared memory. Every element of c is one fmaf chain over k = 0, 1, ..., K - 1 from 0, in both.
//
// gemm_f32 (b [K, N], already k-major): BM = 128 unless SGEMM_BM says 96 (fewer rows per tile make
// more tiles, which fills the last wave better where N is narrow: docs/gemm_f32.md, "Tile
// height"). K advances 8 at a time through two buffers: the next step's global loads are issued
// into registers before the current step's products and stored after them (A transposed on the
// way), so one __syncthreads per step suffices and the loads' latency hides behind 512 FFMAs.
//
// gemm_nt_f32 and the Linears (a and b both [rows, K]): 128-row tiles, K advancing 16 at a time
// through two buffers filled by asynchronous 4-byte copies (cp.async, sm_80+). A 4-byte copy can
// land anywhere in shared memory, so both tiles are transposed on the way in without staging
// registers, which leaves the registers for the 16-deep steps (half the __syncthreads of 8-deep
// ones) and needs only 4-byte alignment of a and b. It beat register-staged NT bodies on 96-row
// tiles at BERT-base's N = 768 Linears too, so it takes 128-row tiles everywhere, in dynamic
// shared memory (docs/gemm_f32.md, "Tile height" and "Schedule").
//
// IREE's bindings are only guaranteed 4-byte aligned, so float4 global loads and stores are taken
// only where the base pointer is 16-byte aligned and the row length a multiple of 4 (then every
// 4-element group starting at a multiple of 4 is aligned and wholly inside the row or wholly past
// it); otherwise element by element. The choice is block-uniform, made once per launch.

#include <cstddef>
#include <cstdint>

#include <cuda_pipeline_primitives.h>

#include "gelu.cuh"

namespace sgemm {

#ifndef SGEMM_BM
#define SGEMM_BM 128
#endif
constexpr int BN = 128;
constexpr int THREADS = 256;
// Row padding of the k-major tiles: transposed stores of a warp (32 consecutive rows of one k, or
// 4 k of 8 rows) then hit 32 distinct banks (4 * (rows + PAD) = 16 banks mod 32 for k four apart,
// rows + PAD = 4 mod 32 for consecutive k), and rows stay 16-byte aligned for the float4 reads.
constexpr int PAD = 4;
constexpr int LDB = BN + PAD;

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// One asynchronous 4-byte copy from global to shared memory (sm_80+), waited for with
// __pipeline_wait_prior; `inside` false: 4 bytes of zeros, nothing read (src must still be a
// valid address). On the GPU one cp.async with the source size in a register: the header's
// __pipeline_memcpy_async takes it as an immediate and branches between two copies.
__device__ __forceinline__ void copy4_async(float* dst, const float* src, bool inside) {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))), "l"(src), "r"(inside ? 4 : 0)
               : "memory");
#else  // a host build of this source (tests/library/test_gemm_f32.py emulates the CUDA it uses)
  __pipeline_memcpy_async(dst, src, 4, inside ? 0 : 4);
#endif
}

// This thread's micro-tile of its block's BM-row tile of c: its rows (4 + ROWS_HI), columns 8.
template <int BM>
struct MicroTile {
  static_assert(BM == 128 || BM == 96, "the micro-tile's rows: 4 + 4 (BM = 128) or 4 + 2 (BM = 96) a thread");
  static constexpr int ROWS_HI = (BM - 64) / 16;  // a thread's rows in the tile's rows 64 .. BM - 1
  static constexpr int ROWS = 4 + ROWS_HI;
  static constexpr int LDA = BM + PAD;
  const int tx = threadIdx.x % 16;  // the thread's columns: tx*4 + {0..3}, 64 + tx*4 + {0..3}
  const int ty = threadIdx.x / 16;  // its rows: ty*4 + {0..3}, 64 + ty*ROWS_HI + {0..ROWS_HI-1}
  // The tile's first row and column. Tiles of M along x: the grid's x has no 65535 limit, and the
  // blocks of one wave then share a few column tiles of b.
  const int m0 = blockIdx.x * BM;
  const int n0 = blockIdx.y * BN;
  float acc[ROWS][8];

  __device__ __forceinline__ MicroTile() {
#pragma unroll
    for (int i = 0; i < ROWS; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
  }

  // The products of one k: this thread's A values of column k times its B values of row k.
  __device__ __forceinline__ void multiply(const float* __restrict__ as_k, const float* __restrict__ bs_k) {
    const float4 a_lo = *reinterpret_cast<const float4*>(as_k + ty * 4);
    float ar[ROWS] = {a_lo.x, a_lo.y, a_lo.z, a_lo.w};
    if constexpr (ROWS_HI == 4) {
      const float4 a_hi = *reinterpret_cast<const float4*>(as_k + 64 + ty * 4);
      ar[4] = a_hi.x, ar[5] = a_hi.y, ar[6] = a_hi.z, ar[7] = a_hi.w;
    } else {
      const float2 a_hi = *reinterpret_cast<const float2*>(as_k + 64 + ty * 2);
      ar[4] = a_hi.x, ar[5] = a_hi.y;
    }
    const float4 b_lo = *reinterpret_cast<const float4*>(bs_k + tx * 4);
    const float4 b_hi = *reinterpret_cast<const float4*>(bs_k + 64 + tx * 4);
    const float br[8] = {b_lo.x, b_lo.y, b_lo.z, b_lo.w, b_hi.x, b_hi.y, b_hi.z, b_hi.w};
#pragma unroll
    for (int i = 0; i < ROWS; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
  }

  // Stores epilogue(sum, row, col) of every element inside c [M, N].
  template <class Epilogue>
  __device__ __forceinline__ void store(float* __restrict__ c, int M, int N, const Epilogue& epilogue) const {
    const bool vec_c = aligned16(c) && (N % 4 == 0);
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
      const int row = m0 + (i < 4 ? ty * 4 + i : 64 + ty * ROWS_HI + (i - 4));
      if (row >= M) continue;
      float* c_row = c + static_cast<size_t>(row) * static_cast<size_t>(N);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int col = n0 + half * 64 + tx * 4;
        const float* v = &acc[i][half * 4];
        if (vec_c && col < N) {  // N % 4 == 0: all four columns inside
          *reinterpret_cast<float4*>(c_row + col) =
              make_float4(epilogue(v[0], row, col), epilogue(v[1], row, col + 1), epilogue(v[2], row, col + 2), epilogue(v[3], row, col + 3));
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (col + j < N) c_row[col + j] = epilogue(v[j], row, col + j);
        }
      }
    }
  }
};

// Four consecutive elements k0..k0+3 of row `row` of a row-major [rows, cols] matrix, zeros past
// its edges. vec: p is 16-byte aligned and cols % 4 == 0, so k0 < cols (k0 a multiple of 4) puts
// all four in the row at an aligned address.
__device__ __forceinline__ float4 load4(const float* __restrict__ p, int row, int rows, int k0, int cols, bool vec) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (row < rows && k0 < cols) {
    const float* q = p + static_cast<size_t>(row) * static_cast<size_t>(cols) + k0;
    if (vec) {
      v = __ldg(reinterpret_cast<const float4*>(q));
    } else {
      v.x = __ldg(q);
      if (k0 + 1 < cols) v.y = __ldg(q + 1);
      if (k0 + 2 < cols) v.z = __ldg(q + 2);
      if (k0 + 3 < cols) v.w = __ldg(q + 3);
    }
  }
  return v;
}

// Epilogues: what happens to each finished sum c[row, col] before it is stored. Each step is one
// f32 operation rounded as the model's own separate op rounds it, in the model's order (the sum,
// then + bias, then GELU or + residual), so the bias and residual forms store the bits the GEMM
// followed by the model's adds would; GELU is erff's (within a few ulps of another f32 erf).
struct Plain {
  __device__ __forceinline__ float operator()(float v, int, int) const { return v; }
};

template <class Act>
struct BiasAct {  // Act(c + bias[col]); BiasAct<NoActivation>: the bias alone
  const float* __restrict__ bias;
  __device__ __forceinline__ float operator()(float v, int, int col) const { return Act::apply(v + __ldg(bias + col)); }
};

struct BiasResidual {  // (c + bias[col]) + residual[row, col], residual [M, N] row-major
  const float* __restrict__ bias;
  const float* __restrict__ residual;
  int n;
  __device__ __forceinline__ float operator()(float v, int row, int col) const {
    return (v + __ldg(bias + col)) + __ldg(residual + static_cast<size_t>(row) * static_cast<size_t>(n) + col);
  }
};

// c = a @ b, b [K, N]: register-staged loads, SGEMM_BM-row tiles, 8-deep steps.
__device__ __forceinline__ void gemm_nn_body(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int M, int N, int K) {
  constexpr int BM = SGEMM_BM;
  constexpr int BK = 8;
  constexpr int LDA = MicroTile<BM>::LDA;
  static_assert(BN * BK == 4 * THREADS, "each thread loads one group of 4 of B per step");
  static_assert(BM * BK <= 4 * THREADS, "a thread loads at most one group of 4 of A per step");
  __shared__ __align__(16) float As[2][BK][LDA];
  __shared__ __align__(16) float Bs[2][BK][LDB];

  MicroTile<BM> tile;
  const int tid = threadIdx.x;
  const int m0 = tile.m0;
  const int n0 = tile.n0;
  const bool vec_a = aligned16(a) && (K % 4 == 0);
  const bool vec_b = aligned16(b) && (N % 4 == 0);

  // A [M, K]: thread t takes row t / 2, k (t % 2) * 4 .. + 3. At BM = 96 the threads past A's 96
  // rows load none of A (zeros, not stored).
  const int ld_row = tid / 2;
  const int ld_k = (tid % 2) * 4;
  const bool loads_a = BM * BK == 4 * THREADS || ld_row < BM;  // the same in a whole warp; always at BM = 128
  // B [K, N]: thread t takes k row t / 32, columns (t % 32) * 4 .. + 3.
  const int ldb_k = tid / 32;
  const int ldb_n = (tid % 32) * 4;

  auto load_a = [&](int k_base) { return loads_a ? load4(a, m0 + ld_row, M, k_base + ld_k, K, vec_a) : make_float4(0.f, 0.f, 0.f, 0.f); };
  auto load_b = [&](int k_base) { return load4(b, k_base + ldb_k, K, n0 + ldb_n, N, vec_b); };
  auto store_tiles = [&](int buf, float4 va, float4 vb) {
    if (loads_a) {
      As[buf][ld_k + 0][ld_row] = va.x;
      As[buf][ld_k + 1][ld_row] = va.y;
      As[buf][ld_k + 2][ld_row] = va.z;
      As[buf][ld_k + 3][ld_row] = va.w;
    }
    *reinterpret_cast<float4*>(&Bs[buf][ldb_k][ldb_n]) = vb;
  };

  // Every thread runs the same number of steps and reaches every __syncthreads: no thread
  // returns early (threads past M or N load zeros and skip only their stores).
  const int steps = (K + BK - 1) / BK;
  store_tiles(0, load_a(0), load_b(0));
  __syncthreads();

  int buf = 0;
  for (int step = 0; step < steps; ++step) {
    const bool more = step + 1 < steps;  // block-uniform
    float4 next_a = make_float4(0.f, 0.f, 0.f, 0.f);
    float4 next_b = next_a;
    if (more) {
      next_a = load_a((step + 1) * BK);
      next_b = load_b((step + 1) * BK);
    }
#pragma unroll
    for (int k = 0; k < BK; ++k) tile.multiply(&As[buf][k][0], &Bs[buf][k][0]);
    if (more) store_tiles(buf ^ 1, next_a, next_b);
    // The other buffer is complete for the next step, and no thread still reads this one when it
    // gets overwritten a step later.
    __syncthreads();
    buf ^= 1;
  }
  tile.store(c, M, N, Plain{});
}

// The NT kernels' tiles live in dynamic shared memory, NT_SHARED_BYTES a launch (see "Schedule"
// in docs/gemm_f32.md: with the first step's copies issued under `steps > 0`, ptxas then keeps
// more shared-memory reads in flight, 127-128 registers instead of 117-119, 4-6% faster).
constexpr int NT_BK = 16;
constexpr int NT_SHARED_BYTES = 2 * NT_BK * (128 + PAD + LDB) * 4;  // 33792
#if !defined(__CUDA_ARCH__)
float* nt_shared();  // a host build of this source: the emulation gives each block one array
#endif

// c = epilogue(a @ b^T), b [N, K]: 128-row tiles, 16-deep steps, two buffers filled by cp.async.
template <class Epilogue>
__device__ __forceinline__ void gemm_nt_body(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int M, int N, int K,
                                             const Epilogue& epilogue) {
  constexpr int BM = 128;
  constexpr int BK = NT_BK;
  constexpr int LDA = MicroTile<BM>::LDA;
  constexpr int GROUPS = 128 / 32;  // row groups of 32 a thread copies, of A and of B
  static_assert(BM == BN, "A and B tiles are copied the same way");
  static_assert(NT_SHARED_BYTES == 2 * BK * (LDA + LDB) * 4, "two buffers of A and B tiles");
#if defined(__CUDA_ARCH__)
  extern __shared__ __align__(16) float dynamic_shared[];
  float (*As)[BK][LDA] = reinterpret_cast<float (*)[BK][LDA]>(dynamic_shared);
#else
  float (*As)[BK][LDA] = reinterpret_cast<float (*)[BK][LDA]>(nt_shared());
#endif
  float (*Bs)[BK][LDB] = As + 2;

  MicroTile<BM> tile;
  const int tid = threadIdx.x;
  const int m0 = tile.m0;
  const int n0 = tile.n0;
  // Thread t copies k = t % 8 and 8 + t % 8 of rows t / 8 + 32 g: one copy instruction of a warp
  // reads 4 rows x 8 consecutive floats and writes 32 distinct banks (k-major, LDA = 4 mod 32).
  const int cp_k = tid % 8;
  const int cp_row = tid / 8;
  const size_t group_stride = 32 * static_cast<size_t>(K);
  // A row past the edge is never read (its copies are zero fills), so its pointer may point anywhere.
  const float* a_src = a + static_cast<size_t>(min(m0 + cp_row, M - 1)) * static_cast<size_t>(K) + cp_k;
  const float* b_src = b + static_cast<size_t>(min(n0 + cp_row, N - 1)) * static_cast<size_t>(K) + cp_k;
  unsigned a_rows = 0, b_rows = 0;  // bit g: row group g's row is inside M (N)
#pragma unroll
  for (int g = 0; g < GROUPS; ++g) {
    a_rows |= (m0 + cp_row + 32 * g < M) ? (1u << g) : 0u;
    b_rows |= (n0 + cp_row + 32 * g < N) ? (1u << g) : 0u;
  }
  // One step's copies into buffer `buf`; an element past K or past the last row is a zero fill
  // (4 bytes of zeros, nothing read).
  auto issue = [&](int buf, int step) {
    const int k_base = step * BK;
#pragma unroll
    for (int q = 0; q < BK / 8; ++q) {
      const int k = 8 * q + cp_k;
      const bool k_inside = k_base + k < K;
#pragma unroll
      for (int g = 0; g < GROUPS; ++g) {
        const bool a_inside = k_inside && ((a_rows >> g) & 1u);
        const bool b_inside = k_inside && ((b_rows >> g) & 1u);
        copy4_async(&As[buf][k][cp_row + 32 * g], a_inside ? a_src + g * group_stride + k_base + 8 * q : a, a_inside);
        copy4_async(&Bs[buf][k][cp_row + 32 * g], b_inside ? b_src + g * group_stride + k_base + 8 * q : b, b_inside);
      }
    }
    __pipeline_commit();
  };

  // Every thread runs every step and reaches every __syncthreads (no early return).
  const int steps = (K + BK - 1) / BK;
  // The first step's copies; none where K < 1, and then an empty group, so that every path commits one.
  if (steps > 0)
    issue(0, 0);
  else
    __pipeline_commit();
  for (int step = 0; step < steps; ++step) {
    const int buf = step & 1;
    // This step's copies are done (the only ones committed and not yet waited for), and visible
    // to the whole block after the barrier; every thread is also past the previous step's
    // products, so the other buffer is free for the next step's copies.
    __pipeline_wait_prior(0);
    __syncthreads();
    if (step + 1 < steps) issue(buf ^ 1, step + 1);
#pragma unroll
    for (int k = 0; k < BK; ++k) tile.multiply(&As[buf][k][0], &Bs[buf][k][0]);
  }
  tile.store(c, M, N, epilogue);
}

}  // namespace sgemm

// 256 threads; two blocks per SM (at most 128 registers a thread) keep one block's products
// going while the other waits at its __syncthreads. gemm_f32's tiles are SGEMM_BM rows, the NT
// kernels' 128 in every build.
extern "C" __global__ void __launch_bounds__(256, 2)
gemm_f32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int M, int N, int K) {
  sgemm::gemm_nn_body(a, b, c, M, N, K);
}

extern "C" __global__ void __launch_bounds__(256, 2)
gemm_nt_f32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int M, int N, int K) {
  sgemm::gemm_nt_body(a, b, c, M, N, K, sgemm::Plain{});
}

// A Linear (torch's linear(x, w, bias): w [N, K] as stored, bias [N]) and what follows it in a
// transformer: c = x @ w^T + bias; erf-GELU of that (BERT's MLP); + residual [M, N] (the
// projections before a residual add).
extern "C" __global__ void __launch_bounds__(256, 2)
gemm_nt_bias_f32(const float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ bias, float* __restrict__ c, int M, int N, int K) {
  sgemm::gemm_nt_body(a, b, c, M, N, K, sgemm::BiasAct<NoActivation>{bias});
}

extern "C" __global__ void __launch_bounds__(256, 2)
gemm_nt_bias_gelu_erf_f32(const float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ bias, float* __restrict__ c, int M, int N,
                          int K) {
  sgemm::gemm_nt_body(a, b, c, M, N, K, sgemm::BiasAct<GeluErf>{bias});
}

extern "C" __global__ void __launch_bounds__(256, 2)
gemm_nt_bias_residual_f32(const float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ bias, const float* __restrict__ residual,
                          float* __restrict__ c, int M, int N, int K) {
  sgemm::gemm_nt_body(a, b, c, M, N, K, sgemm::BiasResidual{bias, residual, N});
}

// c[z] = a[z] @ b[z] for z = blockIdx.z: a batch matmul, a [B, M, K], b [B, K, N], c [B, M, N]
// (an f32 model's attention: q @ k^T with the keys already transposed, and p @ v). Each batch's
// base is checked for alignment on its own, as IREE's bindings are. One block per SM: within the
// 128 registers of two, the batch's base addresses spill.
extern "C" __global__ void __launch_bounds__(256, 1)
gemm_batched_f32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int M, int N, int K) {
  const long z = blockIdx.z;
  sgemm::gemm_nn_body(a + z * M * K, b + z * K * N, c + z * M * N, M, N, K);
}
