// Elementwise bias + GELU over a [rows, cols] tensor: out = gelu(x + bias[col]), GELU's tanh
// approximation (gelu.cuh).
//
// Memory-bound (the arithmetic per element is a dozen flops), so each thread moves 16-byte
// vectors: a group of 16 bytes of the narrower of input and output type (4 floats, 8 halves /
// bfloat16s; bias_gelu_f32_bf16 reads 8 floats as two vectors and writes 8 bfloat16s as one).
// The vector path needs the three pointers 16-byte aligned (IREE bindings are only
// element-aligned) and cols a multiple of the group, so that a group never straddles two rows
// and bias is read as aligned vectors too; otherwise the scalar path gives the same result.
// Arithmetic is in float for every storage type.

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gelu.cuh"

namespace {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// a % m in 32 bits whenever a fits: a 64-bit modulo is a subroutine of some 70 instructions,
// more than a thread's whole share of the arithmetic when it moves one vector.
__device__ __forceinline__ int mod(long long a, int m) {
  return static_cast<int>(a <= 0xffffffffLL ? static_cast<unsigned>(a) % static_cast<unsigned>(m) : a % m);
}

// Each thread starts at column tid % cols and advances by a fixed step per grid-stride
// iteration: a compare-and-subtract instead of a modulo per element. x and bias are Tin, out is
// Tout (bias_gelu_f32_bf16 writes the bf16 a following bf16 matmul reads, saving the separate
// cast pass that would read the f32 result again).
template <typename Tin, typename Tout>
__device__ __forceinline__ void bias_gelu(const Tin* __restrict__ x, const Tin* __restrict__ bias,
                                          Tout* __restrict__ out, int rows, int cols) {
  constexpr int kVec = 16 / (sizeof(Tin) < sizeof(Tout) ? sizeof(Tin) : sizeof(Tout));  // elements per group
  constexpr int kIn = kVec * sizeof(Tin) / 16;    // 16-byte vectors of x (and bias) per group
  constexpr int kOut = kVec * sizeof(Tout) / 16;  // 16-byte vectors of out per group
  // gelu_tanh's fast form for 16-bit results: with 8 halves per 16-byte vector the accurate
  // forms would make the kernel compute-bound.
  constexpr bool kFast = sizeof(Tout) < 4;
  const long long n = static_cast<long long>(rows) * cols;
  const long long threads = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long tid = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(bias) |
                         reinterpret_cast<uintptr_t>(out)) & 15) == 0;
  if (aligned && cols % kVec == 0) {
    const int col_vecs = cols / kVec;
    const uint4* x4 = reinterpret_cast<const uint4*>(x);
    const uint4* b4 = reinterpret_cast<const uint4*>(bias);
    uint4* out4 = reinterpret_cast<uint4*>(out);
    int c = mod(tid, col_vecs);
    const int step = mod(threads, col_vecs);
    for (long long i = tid; i < n / kVec; i += threads) {
      alignas(16) Tin xv[kVec];
      alignas(16) Tin bv[kVec];
      alignas(16) Tout ov[kVec];
#pragma unroll
      for (int j = 0; j < kIn; ++j) {
        reinterpret_cast<uint4*>(xv)[j] = x4[i * kIn + j];
        reinterpret_cast<uint4*>(bv)[j] = b4[c * kIn + j];
      }
#pragma unroll
      for (int k = 0; k < kVec; ++k) ov[k] = from_float<Tout>(gelu_tanh<kFast>(to_float(xv[k]) + to_float(bv[k])));
#pragma unroll
      for (int j = 0; j < kOut; ++j) out4[i * kOut + j] = reinterpret_cast<const uint4*>(ov)[j];
      c += step;
      if (c >= col_vecs) c -= col_vecs;
    }
  } else {
    int c = mod(tid, cols);
    const int step = mod(threads, cols);
    for (long long i = tid; i < n; i += threads) {
      out[i] = from_float<Tout>(gelu_tanh<kFast>(to_float(x[i]) + to_float(bias[c])));
      c += step;
      if (c >= cols) c -= cols;
    }
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(256)
bias_gelu_f32(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
              int rows, int cols) {
  bias_gelu(x, bias, out, rows, cols);
}

extern "C" __global__ void __launch_bounds__(256)
bias_gelu_f16(const __half* __restrict__ x, const __half* __restrict__ bias, __half* __restrict__ out,
              int rows, int cols) {
  bias_gelu(x, bias, out, rows, cols);
}

extern "C" __global__ void __launch_bounds__(256)
bias_gelu_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ bias, __nv_bfloat16* __restrict__ out,
               int rows, int cols) {
  bias_gelu(x, bias, out, rows, cols);
}

// f32 in (a matmul's f32 accumulator), bf16 out (the next bf16 matmul's operand).
extern "C" __global__ void __launch_bounds__(256)
bias_gelu_f32_bf16(const float* __restrict__ x, const float* __restrict__ bias, __nv_bfloat16* __restrict__ out,
                   int rows, int cols) {
  bias_gelu(x, bias, out, rows, cols);
}
