// Elementwise kernels for the ops of Llama-style models that no other kernel file covers:
//
//   swiglu_f32 / swiglu_bf16: out = silu(gate) * up = gate / (1 + exp(-gate)) * up, over [rows, n]
//   tensors (gate and up: the two projections of Llama's MLP, or the two halves of one fused
//   projection, each contiguous).
//
// Each element is computed in f32 from the (widened) inputs and rounded once to the output type.
// f32 uses expf and an IEEE division; bf16 uses __expf and __fdividef (~2^-21 relative), which its
// rounding (2^-8) dwarfs. For very negative gate, exp(-gate) overflows to inf and gate / inf is -0,
// as torch's silu gives.
//
// The tensors are read as one run of rows * n elements: 16-byte vectors (4 floats, 8 bfloat16s)
// when all three pointers are 16-byte aligned (IREE's bindings are only element-aligned), else one
// element at a time; every thread strides over the run, so any grid is correct (the spec's launches
// one thread per vector).
#include <cstdint>
#include <cuda_bf16.h>

namespace {

template <bool kFast>
__device__ __forceinline__ float silu_times(float gate, float up) {
  return kFast ? __fdividef(gate, 1.0f + __expf(-gate)) * up : gate / (1.0f + expf(-gate)) * up;
}

__device__ __forceinline__ bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// One 16-byte vector of gate, up and out: 4 floats.
__device__ __forceinline__ void swiglu_vector(const float* gate, const float* up, float* out) {
  const float4 g = *reinterpret_cast<const float4*>(gate);
  const float4 u = *reinterpret_cast<const float4*>(up);
  *reinterpret_cast<float4*>(out) = make_float4(silu_times<false>(g.x, u.x), silu_times<false>(g.y, u.y), silu_times<false>(g.z, u.z),
                                                silu_times<false>(g.w, u.w));
}

// One 16-byte vector of gate, up and out: 8 bfloat16s, each pair widened and rounded together.
__device__ __forceinline__ void swiglu_vector(const __nv_bfloat16* gate, const __nv_bfloat16* up, __nv_bfloat16* out) {
  const uint4 g = *reinterpret_cast<const uint4*>(gate);
  const uint4 u = *reinterpret_cast<const uint4*>(up);
  const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&g);
  const __nv_bfloat162* u2 = reinterpret_cast<const __nv_bfloat162*>(&u);
  uint4 o;
  __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 gf = __bfloat1622float2(g2[i]);
    const float2 uf = __bfloat1622float2(u2[i]);
    o2[i] = __floats2bfloat162_rn(silu_times<true>(gf.x, uf.x), silu_times<true>(gf.y, uf.y));
  }
  *reinterpret_cast<uint4*>(out) = o;
}

template <typename T>
__device__ __forceinline__ void swiglu(const T* __restrict__ gate, const T* __restrict__ up, T* __restrict__ out, size_t count) {
  constexpr int kPerVector = 16 / sizeof(T);
  constexpr bool kFast = sizeof(T) < 4;
  const size_t first = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t scalar_from = 0;  // where the element-by-element pass starts
  if (aligned16(gate) && aligned16(up) && aligned16(out)) {
    const size_t vectors = count / kPerVector;
    for (size_t v = first; v < vectors; v += stride) swiglu_vector(gate + v * kPerVector, up + v * kPerVector, out + v * kPerVector);
    scalar_from = vectors * kPerVector;  // the tail, fewer than one vector
  }
  for (size_t i = scalar_from + first; i < count; i += stride) store(out + i, silu_times<kFast>(widen(gate[i]), widen(up[i])));
}

}  // namespace

// gate, up, out: [rows, n], contiguous. Block: any; grid: any (kernels/model_ops.toml launches one
// thread per 16-byte vector).
extern "C" __global__ void swiglu_f32(const float* __restrict__ gate, const float* __restrict__ up, float* __restrict__ out, int rows, int n) {
  swiglu(gate, up, out, size_t(rows) * size_t(n));
}

extern "C" __global__ void swiglu_bf16(const __nv_bfloat16* __restrict__ gate, const __nv_bfloat16* __restrict__ up, __nv_bfloat16* __restrict__ out,
                                       int rows, int n) {
  swiglu(gate, up, out, size_t(rows) * size_t(n));
}
