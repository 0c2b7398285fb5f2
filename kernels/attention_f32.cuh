// What the f32 attention kernels share (flash_attention_f32.cu on the CUDA cores,
// flash_attention_f32_f64acc.cu on the FP64 tensor cores): the maskings and layouts of their entry
// points, where their rows are, the asynchronous copies and the exponential.
#pragma once

#include <cstdint>

namespace attention_f32 {

enum Masking { NONE, CAUSAL, ADDITIVE };

constexpr float LOG2E = 1.4426950408889634f;

// The PTX below has plain C++ stand-ins where __CUDA_ARCH__ is undefined: flash_attention_f32.cu's
// tests run it on the host (tests/models/test_flash_attention_f32.py), one std::thread per CUDA
// thread.
#ifdef __CUDA_ARCH__
__device__ __forceinline__ unsigned smem(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
#endif

// 16 bytes global -> shared, asynchronously; with `valid` false the 16 bytes are zeros and
// nothing is read.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem(dst)), "l"(src), "r"(valid ? 16 : 0) : "memory");
#else
  for (int e = 0; e < 4; ++e) static_cast<float*>(dst)[e] = valid ? static_cast<const float*>(src)[e] : 0.0f;
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Every copy group but the latest one has landed (the element copies have, always).
__device__ __forceinline__ void cp_async_wait_all_but_latest() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.wait_group 1;\n" ::: "memory");
#endif
}

__device__ __forceinline__ float ex2(float x) {
#ifdef __CUDA_ARCH__
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Where q, k, v and out are: HEADS, [B, H, S, D] (SDPA's operands); BSHD, [B, S, H, D] (separate
// q, k and v projections' [B, S, H * D] results as stored, out the [B, S, E] the output projection
// reads: no transposes computed); QKV, q, k and v the same rows of one [B, S, 3, H, D] tensor (a
// qkv projection's [B, S, 3E] result as stored, E = H * D: row s of head h at s * 3E + h * D, k E
// and v 2E after q, each passed as its own base; Hq = Hkv = H, Sq = Sk = S) and out [B, S, H, D].
// The same computation on each.
enum Layout { HEADS, BSHD, QKV };

// Where a (batch, head)'s rows are, in floats: rows of a [B, S, heads, D] tensor are heads * D
// apart (QKV's q, k and v rows: 3 H heads), a head's rows of [B, H, S, D] D apart.
template <Layout LAYOUT>
__device__ __forceinline__ int heads_a_row(int heads) { return LAYOUT == QKV ? 3 * heads : heads; }
template <int D, Layout LAYOUT>
__device__ __forceinline__ long row_pitch(int heads_in_row) { return LAYOUT == HEADS ? D : static_cast<long>(heads_in_row) * D; }
// The first row of head `head` of batch b in a tensor of `heads` heads (a row) and `rows` rows.
template <int D, Layout LAYOUT>
__device__ __forceinline__ long first_row(int b, int heads, int head, int rows) {
  return LAYOUT == HEADS ? (static_cast<long>(b) * heads + head) * rows * D : (static_cast<long>(b) * rows * heads + head) * D;
}

}  // namespace attention_f32
