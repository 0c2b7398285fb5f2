// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed as
// x * sigmoid(2u) (the same function: 0.5 (1 + tanh u) = 1 / (1 + exp(-2u))), which needs one
// exp and saturates cleanly: for very negative x the exp overflows to inf and x / inf is -0.
// Shared by the elementwise kernels (elementwise.cu) and the GEMMs' fused epilogues (gemm.cu,
// gemm_nt.cu), so that a fused GEMM + bias + GELU gives the same bits as the GEMM followed by
// bias_gelu_f32_bf16; and GELU's exact form, the same in both GEMMs.
#pragma once

// kFast: __expf and __fdividef (the hardware approximations, ~2^-21 relative error) instead of
// expf and an IEEE division, for 16-bit results whose rounding (2^-11 or coarser) dwarfs the
// difference. (Where -2u is huge, 1 + __expf is inf and the result 0, as a 16-bit type rounds it anyway.)
template <bool kFast>
__device__ __forceinline__ float gelu_tanh(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return kFast ? __fdividef(x, 1.0f + __expf(-2.0f * u)) : x / (1.0f + expf(-2.0f * u));
}

// The activations a GEMM's bias epilogue applies before its one rounding to bf16.
struct GeluTanh {  // the fast GELU, as bias_gelu_f32_bf16
  static __device__ __forceinline__ float apply(float x) { return gelu_tanh<true>(x); }
};
struct GeluErf {  // exact GELU, 0.5 x (1 + erf(x / sqrt(2))): torch's default, BERT's
  static __device__ __forceinline__ float apply(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
};
struct NoActivation {
  static __device__ __forceinline__ float apply(float x) { return x; }
};
