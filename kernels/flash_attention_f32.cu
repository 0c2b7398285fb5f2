// FlashAttention-style forward pass in f32 on the CUDA cores, the computation of torch's
// scaled_dot_product_attention for f32 models:
//
//     out[b, h] = softmax(q[b, h] @ k[b, h / G]^T * scale + mask) @ v[b, h / G]      G = Hq / Hkv
//
// q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D], out [B, Hq, Sq, D], all contiguous f32. D is 64 or
// 128. The semantics and entry-point shapes are flash_attention.cu's (bf16, f16): Hkv divides Hq
// (query head h reads key/value head h / (Hq / Hkv), never materialising the repeat); any Sq, Sk
// >= 1; `scale` as given. Three maskings, each its own entry point:
//   - none;
//   - causal, top-left aligned as SDPA's is_causal: query i sees keys j <= i (for Sq != Sk too);
//   - additive: mask [MB, MH, MQ, Sk] (f32) added to the scaled scores, each of MB, MH, MQ the
//     full size (B, Hq, Sq) or 1 (broadcast). Batch b reads mask batch b % MB, head h mask head
//     h % MH, query row i mask row min(i, MQ - 1), so no size can read out of bounds.
// Hq % Hkv != 0 is an error the kernel can't report: it writes NaN everywhere instead.
//
// Numerics: f32 throughout and no tensor cores (so no TF32 rounding of the inputs): scores are
// sums of D fused multiply-adds of the f32 inputs, the softmax is an online softmax in f32
// registers (running row max and sum, the output rescaled when the max grows), exponentials are
// ex2.approx.ftz (~2 ulp) with log2(e) folded into the scale, the probabilities stay f32 for
// p @ v (f32 fused multiply-adds), and the output is divided by the row sum once. A row whose
// keys are all -inf is NaN, as in torch; a finite mask value, however negative (finfo.min),
// stays finite: with the additive mask the max and the differences are taken in natural-log
// units before log2(e) is applied (finfo.min * log2(e) would overflow to -inf), so a row masked
// entirely with one such value averages v, as the float64 reference does.
//
// Design (SIMT, register-blocked): one block of 256 threads per 64 query rows of one (b, h) (grid
// x: b * Hq + h, grid y: the query tile, the longest causal rows first). Thread (ty, tx) of the
// 16 x 16 block owns query rows ty + 16 i (i < 4), keys tx + 16 j of each key tile (j < BK / 16)
// and output columns 4 tx + 64 g .. + 3 (g < D / 64). The q tile, one k tile, one v tile and the
// tile's probabilities p live in shared memory; the copies of the next k tile overlap p @ v, the
// next v tile's overlap the scores: cp.async (16-byte chunks, zero-filled past the ends) where
// q, k and v are 16-byte aligned, element copies where not (IREE's bindings in a model are only
// element-aligned). Per key tile a thread computes its 4 x BK / 16 scores with float4 reads of q
// and k rows, scales and masks them, reduces the row max across the 16 threads of its rows
// (shuffles), writes its weights to p, and adds p @ v for its 4 x D / 16 outputs with float4
// reads of p and v rows. Rows are padded (q, k, v to D + 4 floats: an odd number of 16-byte
// chunks, p to BK + 16) so the float4 reads and p's stores are free of bank conflicts. Rows past
// Sq are zero-filled and not stored; keys past Sk are zero-filled and masked with -inf. A causal
// block stops at its last row's diagonal tile.

#include "attention_f32.cuh"

namespace flash_attention_f32 {

using namespace attention_f32;

constexpr int THREADS = 256;  // 16 x 16
constexpr int BQ = 64;        // query rows per block
constexpr int QT = BQ / 16;   // query rows per thread

// Shared-memory layout per head dim, in floats. d128 takes 32-key tiles so that two blocks fit
// an SM (80 KB each) as with d64's 64-key tiles (71 KB).
template <int D>
struct Tiles {
  static constexpr int BK = D == 64 ? 64 : 32;  // keys per tile
  static constexpr int KT = BK / 16;            // keys per thread
  static constexpr int DG = D / 64;             // float4 output column groups per thread
  static constexpr int PITCH = D + 4;           // q, k, v rows
  static constexpr int P_PITCH = BK + 16;       // p rows: two rows of a warp's stores 16 banks apart
  static constexpr int K_OFF = BQ * PITCH, V_OFF = K_OFF + BK * PITCH, P_OFF = V_OFF + BK * PITCH;
  static constexpr int BYTES = (P_OFF + BQ * P_PITCH) * 4;
};
static_assert(Tiles<64>::BYTES == 72704 && Tiles<128>::BYTES == 79872, "flash_attention_f32.toml's shared_memory");

// tile[r][c] = src[(r0 + r) * pitch + c] for r0 + r < limit, zeros past it: ROWS rows of D floats
// (pitch D in the heads layout, H * D in BSHD's), row pitch D + 4 in the tile.
template <int ROWS, int D>
__device__ __forceinline__ void load_rows(float* tile, const float* src, long pitch, int r0, int limit, bool async) {
  constexpr int CHUNKS_PER_ROW = D / 4, CHUNKS = ROWS * CHUNKS_PER_ROW;
  static_assert(CHUNKS % THREADS == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int n = 0; n < CHUNKS / THREADS; ++n) {
    const int i = threadIdx.x + n * THREADS;
    const int r = i / CHUNKS_PER_ROW, c = (i % CHUNKS_PER_ROW) * 4;
    const bool in = r0 + r < limit;
    float* dst = tile + r * Tiles<D>::PITCH + c;
    const float* s = src + (r0 + r) * pitch + c;
    if (async) {
      cp_async16(dst, in ? s : src, in);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) dst[e] = in ? s[e] : 0.0f;
    }
  }
}

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }

template <int D, Masking MASKING, Layout LAYOUT = HEADS>
__device__ __forceinline__ void forward(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                                        const float* __restrict__ mask, float* __restrict__ out, int Hq, int Hkv, int Sq, int Sk, int MB,
                                        int MH, int MQ, float scale) {
  using L = Tiles<D>;
  constexpr int BK = L::BK, KT = L::KT, DG = L::DG, PITCH = L::PITCH, P_PITCH = L::P_PITCH;
  extern __shared__ __align__(16) float shared[];
  float* qs = shared;
  float* ks = shared + L::K_OFF;
  float* vs = shared + L::V_OFF;
  float* ps = shared + L::P_OFF;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;

  const int bh = blockIdx.x, b = bh / Hq, h = bh % Hq;
  const int q_tiles = (Sq + BQ - 1) / BQ;
  const int q0 = (q_tiles - 1 - static_cast<int>(blockIdx.y)) * BQ;  // the longest causal rows first
  const int q_heads = heads_a_row<LAYOUT>(Hq), kv_heads = heads_a_row<LAYOUT>(Hkv);
  const long q_pitch = row_pitch<D, LAYOUT>(q_heads), kv_pitch = row_pitch<D, LAYOUT>(kv_heads), out_pitch = row_pitch<D, LAYOUT>(Hq);
  float* oh = out + first_row<D, LAYOUT>(b, Hq, h, Sq);
  if (Hkv <= 0 || Hq % Hkv != 0) {  // no key/value head to read: NaN rather than an out-of-bounds read
    for (int i = threadIdx.x; i < BQ * D; i += THREADS)
      if (q0 + i / D < Sq) oh[(q0 + i / D) * out_pitch + i % D] = __int_as_float(0x7fc00000);
    return;
  }
  const int kvh = h / (Hq / Hkv);
  const float* qh = q + first_row<D, LAYOUT>(b, q_heads, h, Sq);
  const float* kh = k + first_row<D, LAYOUT>(b, kv_heads, kvh, Sk);
  const float* vh = v + first_row<D, LAYOUT>(b, kv_heads, kvh, Sk);
  const float* mslice = MASKING == ADDITIVE ? mask + (static_cast<long>(b % MB) * MH + h % MH) * MQ * Sk : nullptr;
  const int key_end = MASKING == CAUSAL ? min(Sk, min(Sq, q0 + BQ)) : Sk;
  const int k_tiles = (key_end + BK - 1) / BK;
  const bool async = aligned16(q) && aligned16(k) && aligned16(v);

  // Two copy groups in flight at most: q with k(t), then v(t).
  load_rows<BQ, D>(qs, qh, q_pitch, q0, Sq, async);
  load_rows<BK, D>(ks, kh, kv_pitch, 0, Sk, async);
  cp_async_commit();
  load_rows<BK, D>(vs, vh, kv_pitch, 0, Sk, async);
  cp_async_commit();

  float o[QT][4 * DG], m[QT], l[QT];
#pragma unroll
  for (int i = 0; i < QT; ++i) {
    m[i] = -INFINITY, l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < 4 * DG; ++c) o[i][c] = 0.0f;
  }
  // Without a mask the scores are kept in log2 units (log2(e) folded into the scale); with one,
  // in natural units, the differences multiplied by log2(e) (finfo.min * log2(e) would overflow).
  const float score_scale = MASKING == ADDITIVE ? scale : scale * LOG2E;
  const float unit = MASKING == ADDITIVE ? LOG2E : 1.0f;

  for (int t = 0; t < k_tiles; ++t) {
    const int k0 = t * BK;
    cp_async_wait_all_but_latest();  // q and k(t) have landed; v(t) may still be in flight
    __syncthreads();

    float s[QT][KT];
#pragma unroll
    for (int i = 0; i < QT; ++i)
#pragma unroll
      for (int j = 0; j < KT; ++j) s[i][j] = 0.0f;
#pragma unroll 1  // unrolled further, the masked d64 variant spills
    for (int d = 0; d < D; d += 4) {
      float4 qv[QT], kv[KT];
#pragma unroll
      for (int i = 0; i < QT; ++i) qv[i] = ld4(qs + (ty + 16 * i) * PITCH + d);
#pragma unroll
      for (int j = 0; j < KT; ++j) kv[j] = ld4(ks + (tx + 16 * j) * PITCH + d);
#pragma unroll
      for (int i = 0; i < QT; ++i)
#pragma unroll
        for (int j = 0; j < KT; ++j) {
          s[i][j] = fmaf(qv[i].x, kv[j].x, s[i][j]);
          s[i][j] = fmaf(qv[i].y, kv[j].y, s[i][j]);
          s[i][j] = fmaf(qv[i].z, kv[j].z, s[i][j]);
          s[i][j] = fmaf(qv[i].w, kv[j].w, s[i][j]);
        }
    }
    __syncthreads();  // every thread has read k(t) (and p of the previous tile): k(t + 1) may come
    if (t + 1 < k_tiles) load_rows<BK, D>(ks, kh, kv_pitch, k0 + BK, Sk, async);
    cp_async_commit();

#pragma unroll
    for (int i = 0; i < QT; ++i) {
      const int row = q0 + ty + 16 * i;
      const float* mrow = MASKING == ADDITIVE ? mslice + static_cast<long>(min(row, MQ - 1)) * Sk : nullptr;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < KT; ++j) {
        const int key = k0 + tx + 16 * j;
        float x = s[i][j] * score_scale;
        if (MASKING == ADDITIVE) x = key < Sk ? x + __ldg(mrow + key) : -INFINITY;
        else if (key >= Sk || (MASKING == CAUSAL && key > row)) x = -INFINITY;
        s[i][j] = x;
        mx = fmaxf(mx, x);
      }
#pragma unroll
      for (int lane_mask = 1; lane_mask < 16; lane_mask <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, lane_mask));  // the row's 16 threads
      const float m_new = fmaxf(m[i], mx);
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // all -inf so far: weights 0, not NaN
      const float alpha = ex2((m[i] - base) * unit);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < KT; ++j) {
        const float p = ex2((s[i][j] - base) * unit);
        sum += p;
        ps[(ty + 16 * i) * P_PITCH + tx + 16 * j] = p;
      }
      m[i] = m_new;
      l[i] = l[i] * alpha + sum;
#pragma unroll
      for (int c = 0; c < 4 * DG; ++c) o[i][c] *= alpha;
    }
    cp_async_wait_all_but_latest();  // v(t) has landed; k(t + 1) may still be in flight
    __syncthreads();                 // and every thread's weights are in p

#pragma unroll 2
    for (int kk = 0; kk < BK; kk += 4) {
      float4 pv[QT];
#pragma unroll
      for (int i = 0; i < QT; ++i) pv[i] = ld4(ps + (ty + 16 * i) * P_PITCH + kk);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
#pragma unroll
        for (int g = 0; g < DG; ++g) {
          const float4 vv = ld4(vs + (kk + e) * PITCH + 4 * tx + 64 * g);
#pragma unroll
          for (int i = 0; i < QT; ++i) {
            const float p = e == 0 ? pv[i].x : e == 1 ? pv[i].y : e == 2 ? pv[i].z : pv[i].w;
            o[i][4 * g] = fmaf(p, vv.x, o[i][4 * g]);
            o[i][4 * g + 1] = fmaf(p, vv.y, o[i][4 * g + 1]);
            o[i][4 * g + 2] = fmaf(p, vv.z, o[i][4 * g + 2]);
            o[i][4 * g + 3] = fmaf(p, vv.w, o[i][4 * g + 3]);
          }
        }
      }
    }
    __syncthreads();  // every thread has read v(t) and p: v(t + 1) may come
    if (t + 1 < k_tiles) load_rows<BK, D>(vs, vh, kv_pitch, k0 + BK, Sk, async);
    cp_async_commit();
  }

  // Divide by the row sums and store rows < Sq. A row of only -inf keys has l = 0: 0 * (1 / 0)
  // is NaN, as torch.
  const bool vectors = aligned16(out);
#pragma unroll
  for (int i = 0; i < QT; ++i) {
    float sum = l[i];
#pragma unroll
    for (int lane_mask = 1; lane_mask < 16; lane_mask <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, lane_mask);
    const float inv = 1.0f / sum;
    const int row = q0 + ty + 16 * i;
    if (row >= Sq) continue;
#pragma unroll
    for (int g = 0; g < DG; ++g) {
      float* dst = oh + row * out_pitch + 4 * tx + 64 * g;
      const float4 y = make_float4(o[i][4 * g] * inv, o[i][4 * g + 1] * inv, o[i][4 * g + 2] * inv, o[i][4 * g + 3] * inv);
      if (vectors) {
        *reinterpret_cast<float4*>(dst) = y;
      } else {
        dst[0] = y.x, dst[1] = y.y, dst[2] = y.z, dst[3] = y.w;
      }
    }
  }
}

}  // namespace flash_attention_f32

using flash_attention_f32::ADDITIVE;
using flash_attention_f32::BSHD;
using flash_attention_f32::CAUSAL;
using flash_attention_f32::forward;
using flash_attention_f32::NONE;
using flash_attention_f32::QKV;

// The entry points: flash_attn_f32_d<D>[_causal | _mask] ([B, H, S, D]) and flash_attn_bshd_f32_d<D>[_causal |
// _mask] ([B, S, H, D]). Without a mask: (q, k, v, out, B, Hq, Hkv, Sq, Sk, scale); with one: (q,
// k, v, mask, out, B, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale). flash_attn_qkv_f32_d<D>[_causal | _mask]:
// qkv [B, S, 3, H, D] -> out [B, S, H, D] (self-attention), (qkv, out, B, S, H, scale) or (qkv,
// mask, out, B, S, H, MB, MH, MQ, scale), mask [MB, MH, MQ, S].
// Launch: 256 threads, grid (B * Hq, ceildiv(Sq, 64)), Tiles<D>::BYTES of dynamic shared memory;
// two blocks per SM (128 registers a thread).
#define FA32_BOUNDS __launch_bounds__(256, 2)

extern "C" __global__ void FA32_BOUNDS flash_attn_f32_d64(const float* q, const float* k, const float* v, float* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<64, NONE>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void FA32_BOUNDS flash_attn_f32_d64_causal(const float* q, const float* k, const float* v, float* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<64, CAUSAL>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void FA32_BOUNDS flash_attn_f32_d64_mask(const float* q, const float* k, const float* v, const float* mask, float* out, int B, int Hq, int Hkv, int Sq, int Sk, int MB, int MH, int MQ, float scale) {
  forward<64, ADDITIVE>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale);
}
extern "C" __global__ void FA32_BOUNDS flash_attn_f32_d128(const float* q, const float* k, const float* v, float* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<128, NONE>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void FA32_BOUNDS flash_attn_f32_d128_causal(const float* q, const float* k, const float* v, float* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<128, CAUSAL>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void FA32_BOUNDS flash_attn_f32_d128_mask(const float* q, const float* k, const float* v, const float* mask, float* out, int B, int Hq, int Hkv, int Sq, int Sk, int MB, int MH, int MQ, float scale) {
  forward<128, ADDITIVE>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale);
}
extern "C" __global__ void FA32_BOUNDS flash_attn_bshd_f32_d64(const float* q, const float* k, const float* v, float* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<64, NONE, BSHD>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void FA32_BOUNDS flash_attn_bshd_f32_d64_causal(const float* q, const float* k, const float* v, float* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<64, CAUSAL, BSHD>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void FA32_BOUNDS flash_attn_bshd_f32_d64_mask(const float* q, const float* k, const float* v, const float* mask, float* out, int B, int Hq, int Hkv, int Sq, int Sk, int MB, int MH, int MQ, float scale) {
  forward<64, ADDITIVE, BSHD>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale);
}
extern "C" __global__ void FA32_BOUNDS flash_attn_bshd_f32_d128(const float* q, const float* k, const float* v, float* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<128, NONE, BSHD>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void FA32_BOUNDS flash_attn_bshd_f32_d128_causal(const float* q, const float* k, const float* v, float* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<128, CAUSAL, BSHD>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void FA32_BOUNDS flash_attn_bshd_f32_d128_mask(const float* q, const float* k, const float* v, const float* mask, float* out, int B, int Hq, int Hkv, int Sq, int Sk, int MB, int MH, int MQ, float scale) {
  forward<128, ADDITIVE, BSHD>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale);
}
extern "C" __global__ void FA32_BOUNDS flash_attn_qkv_f32_d64(const float* qkv, float* out, int B, int S, int H, float scale) {
  forward<64, NONE, QKV>(qkv, qkv + static_cast<long>(H) * 64, qkv + 2 * static_cast<long>(H) * 64, nullptr, out, H, H, S, S, 1, 1, 1, scale);
}
extern "C" __global__ void FA32_BOUNDS flash_attn_qkv_f32_d64_causal(const float* qkv, float* out, int B, int S, int H, float scale) {
  forward<64, CAUSAL, QKV>(qkv, qkv + static_cast<long>(H) * 64, qkv + 2 * static_cast<long>(H) * 64, nullptr, out, H, H, S, S, 1, 1, 1, scale);
}
extern "C" __global__ void FA32_BOUNDS flash_attn_qkv_f32_d64_mask(const float* qkv, const float* mask, float* out, int B, int S, int H, int MB, int MH, int MQ, float scale) {
  forward<64, ADDITIVE, QKV>(qkv, qkv + static_cast<long>(H) * 64, qkv + 2 * static_cast<long>(H) * 64, mask, out, H, H, S, S, MB, MH, MQ, scale);
}
extern "C" __global__ void FA32_BOUNDS flash_attn_qkv_f32_d128(const float* qkv, float* out, int B, int S, int H, float scale) {
  forward<128, NONE, QKV>(qkv, qkv + static_cast<long>(H) * 128, qkv + 2 * static_cast<long>(H) * 128, nullptr, out, H, H, S, S, 1, 1, 1, scale);
}
extern "C" __global__ void FA32_BOUNDS flash_attn_qkv_f32_d128_causal(const float* qkv, float* out, int B, int S, int H, float scale) {
  forward<128, CAUSAL, QKV>(qkv, qkv + static_cast<long>(H) * 128, qkv + 2 * static_cast<long>(H) * 128, nullptr, out, H, H, S, S, 1, 1, 1, scale);
}
extern "C" __global__ void FA32_BOUNDS flash_attn_qkv_f32_d128_mask(const float* qkv, const float* mask, float* out, int B, int S, int H, int MB, int MH, int MQ, float scale) {
  forward<128, ADDITIVE, QKV>(qkv, qkv + static_cast<long>(H) * 128, qkv + 2 * static_cast<long>(H) * 128, mask, out, H, H, S, S, MB, MH, MQ, scale);
}
