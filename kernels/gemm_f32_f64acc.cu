// f32 GEMMs summed in f64 on the FP64 tensor cores: c = a @ b^T (b [N, K], a Linear's weight as
// stored) and the Linear epilogues of gemm_f32.cu, for an f32 model built with
// --allow-wider-accumulation.
//
// Numerics: every f32 input is widened to f64 (exact), the products are exact in f64 and summed
// in f64 (DMMA, mma.sync m16n8k16 .f64), and the sum is rounded to f32 once. That is more accurate
// than an f32 sum (one rounding in all instead of one per step), so the result differs from the
// f32 kernels' bits and is closer to the float64 reference. Epilogues:
//   gemm_nt_f32_f64acc:                   round(sum)
//   gemm_nt_bias_f32_f64acc:              round(sum + bias[col])
//   gemm_nt_bias_gelu_erf_f32_f64acc:     gelu_erf(round(sum + bias[col])), GELU in f32 (gelu.cuh)
//   gemm_nt_bias_residual_f32_f64acc:     round(sum + bias[col] + residual[row, col])
// Why: on an H100/H200 the FP64 tensor cores peak at about the rate of the f32 CUDA cores (67
// TFLOP/s each) and a tensor-core GEMM gets much closer to its peak than a CUDA-core one (measured:
// docs/gemm_f32.md, "f64 accumulation").
//
// Design: one block of 256 threads (8 warps, 2 x 4) per 128 x 128 tile of c, each warp a 64 x 32
// tile: 4 x 4 mma.sync m16n8k16 per 16-deep step, 64 f64 accumulators a thread. The f32 tiles of
// a and b, 32 deep, go to shared memory by cp.async, three stages in flight (16-byte chunks,
// zero-filled past the ends; element loads where a, b or K are not 16-byte aligned, as IREE's
// bindings in a model may be), one __syncthreads a stage, and are widened to f64 as each warp
// reads its fragments. The mma's k order is permuted: lane (g, t) gives hardware k = t + 4j the
// step's k = 4t + j, in A and B alike (the same products, summed in another order), so that each
// fragment row is one float4 read. Rows past M or N and k past K are zeros.

#include <cstdint>

#include "gelu.cuh"
#include "mma_f64.cuh"

namespace dgemm {

constexpr int BM = 128;
constexpr int BN = 128;
constexpr int BK = 32;                              // k a stage: two 16-deep mma steps
constexpr int STAGES = 3;
constexpr int THREADS = 256;
constexpr int WARPS_N = 4;                          // warps 2 (rows) x 4 (columns), each 64 x 32
constexpr int MI = 4, NI = 4;                       // a warp's 16 x 8 mma tiles
constexpr int PITCH = BK;                           // floats per shared row, its 16-byte chunks swizzled (chunk_at)
constexpr int STAGE = (BM + BN) * PITCH;            // floats per stage: A's rows, then B's
constexpr int ROW_CHUNKS = BK / 4;
constexpr int CHUNKS = BM * ROW_CHUNKS / THREADS;   // 16-byte chunks of A (and of B) a thread copies a stage
constexpr int SHARED_BYTES = STAGES * STAGE * 4;
static_assert(SHARED_BYTES == 98304, "gemm_f32_f64acc.toml's shared_memory");
static_assert(BM == BN && MI * 16 * 2 == BM && NI * 8 * WARPS_N == BN, "the warps cover the tile");

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
__device__ __forceinline__ unsigned smem(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// Where a row's 16-byte chunk lies in shared memory: odd rows swap their two halves, so that the 8
// lanes of a fragment read phase (rows g and g + 1, chunks t of one half) cover the 32 banks once.
__device__ __forceinline__ int chunk_at(int row, int chunk) { return chunk ^ ((row & 1) << 2); }

struct Plain {
  __device__ __forceinline__ float operator()(double v, int, int) const { return __double2float_rn(v); }
};

template <class Act>
struct BiasAct {  // Act(round(sum + bias[col])); BiasAct<NoActivation>: the bias alone
  const float* __restrict__ bias;
  __device__ __forceinline__ float operator()(double v, int, int col) const {
    return Act::apply(__double2float_rn(v + static_cast<double>(__ldg(bias + col))));
  }
};

struct BiasResidual {  // round(sum + bias[col] + residual[row, col]), residual [M, N] row-major
  const float* __restrict__ bias;
  const float* __restrict__ residual;
  int n;
  __device__ __forceinline__ float operator()(double v, int row, int col) const {
    const double r = __ldg(residual + static_cast<size_t>(row) * static_cast<size_t>(n) + col);
    return __double2float_rn(v + static_cast<double>(__ldg(bias + col)) + r);
  }
};

template <class Epilogue>
__device__ __forceinline__ void gemm_nt_body(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int M, int N, int K,
                                             Epilogue epilogue) {
  extern __shared__ __align__(16) float shared[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = (warp / WARPS_N) * (MI * 16), wn = (warp % WARPS_N) * (NI * 8);
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  const int k_tiles = (K + BK - 1) / BK;
  const bool async = K % 4 == 0 && aligned16(a) && aligned16(b);

  // k tile s of A and B into stage s % STAGES, then a commit (an empty group past the last tile,
  // so that the wait below counts the same groups every time). Chunk q = tid + 256 i: row q / 8,
  // k 4 (q % 8) .. + 3 of the tile.
  auto issue = [&](int s) {
    if (s < k_tiles) {
      float* stage = shared + (s % STAGES) * STAGE;
#pragma unroll
      for (int op = 0; op < 2; ++op) {
        const float* src = op == 0 ? a : b;
        const int rows = op == 0 ? M : N, r0 = op == 0 ? m0 : n0;
#pragma unroll
        for (int i = 0; i < CHUNKS; ++i) {
          const int q = tid + i * THREADS, row = q / ROW_CHUNKS, chunk = q % ROW_CHUNKS, k = s * BK + chunk * 4;
          float* dst = stage + (op * BM + row) * PITCH + chunk_at(row, chunk) * 4;
          const bool in = r0 + row < rows;
          const float* p = src + static_cast<size_t>(in ? r0 + row : 0) * static_cast<size_t>(K);
          if (async) {  // K % 4 == 0: a chunk is all in or all past K
            const bool valid = in && k < K;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem(dst)), "l"(p + (valid ? k : 0)), "r"(valid ? 16 : 0) : "memory");
          } else {  // element loads, stored now: the __syncthreads before the tile's reads orders them
#pragma unroll
            for (int e = 0; e < 4; ++e) dst[e] = in && k + e < K ? __ldg(p + k + e) : 0.0f;
          }
        }
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };

  double acc[MI][NI][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) issue(s);
  for (int s = 0; s < k_tiles; ++s) {
    // Tile s's copies have landed (only the newer ones may be in flight), everyone's; and every
    // thread is done with tile s - 1, whose stage the copies issued now overwrite.
    asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2) : "memory");
    __syncthreads();
    issue(s + STAGES - 1);
    const float* As = shared + (s % STAGES) * STAGE;
    const float* Bs = As + BM * PITCH;
#pragma unroll
    for (int sub = 0; sub < BK / 16; ++sub) {  // a 16-deep mma step: chunks 4 sub + t of each row
      double af[MI][8];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const int row = wm + mi * 16 + g;
        const float4 top = *reinterpret_cast<const float4*>(As + row * PITCH + chunk_at(row, 4 * sub + t) * 4);
        const float4 bottom = *reinterpret_cast<const float4*>(As + (row + 8) * PITCH + chunk_at(row + 8, 4 * sub + t) * 4);
        af[mi][0] = top.x, af[mi][1] = bottom.x, af[mi][2] = top.y, af[mi][3] = bottom.y;
        af[mi][4] = top.z, af[mi][5] = bottom.z, af[mi][6] = top.w, af[mi][7] = bottom.w;
      }
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int row = wn + ni * 8 + g;
        const float4 col = *reinterpret_cast<const float4*>(Bs + row * PITCH + chunk_at(row, 4 * sub + t) * 4);
        const double bf[4] = {col.x, col.y, col.z, col.w};
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) mma_m16n8k16_f64(acc[mi][ni], af[mi], bf);
      }
    }
  }

#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = m0 + wm + mi * 16 + g + 8 * half;
      if (row >= M) continue;
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int col = n0 + wn + ni * 8 + 2 * t;
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (col + e < N) c[static_cast<size_t>(row) * static_cast<size_t>(N) + col + e] = epilogue(acc[mi][ni][2 * half + e], row, col + e);
      }
    }
  }
}

}  // namespace dgemm

// One block per SM: the 64 f64 accumulators and the fragments take about 230 registers a thread.
extern "C" __global__ void __launch_bounds__(256, 1)
gemm_nt_f32_f64acc(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int M, int N, int K) {
  dgemm::gemm_nt_body(a, b, c, M, N, K, dgemm::Plain{});
}

extern "C" __global__ void __launch_bounds__(256, 1)
gemm_nt_bias_f32_f64acc(const float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ bias, float* __restrict__ c, int M, int N,
                        int K) {
  dgemm::gemm_nt_body(a, b, c, M, N, K, dgemm::BiasAct<NoActivation>{bias});
}

extern "C" __global__ void __launch_bounds__(256, 1)
gemm_nt_bias_gelu_erf_f32_f64acc(const float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ bias, float* __restrict__ c, int M,
                                 int N, int K) {
  dgemm::gemm_nt_body(a, b, c, M, N, K, dgemm::BiasAct<GeluErf>{bias});
}

extern "C" __global__ void __launch_bounds__(256, 1)
gemm_nt_bias_residual_f32_f64acc(const float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ bias,
                                 const float* __restrict__ residual, float* __restrict__ c, int M, int N, int K) {
  dgemm::gemm_nt_body(a, b, c, M, N, K, dgemm::BiasResidual{bias, residual, N});
}
