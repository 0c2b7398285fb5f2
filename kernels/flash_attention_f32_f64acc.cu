// torch's scaled_dot_product_attention for f32 models with its two products summed in f64 on the
// FP64 tensor cores: flash_attention_f32.cu's entry points at head dim 64 (the same layouts,
// maskings, arguments and launch grid), for an f32 model built with --allow-wider-accumulation.
//
// Numerics: each score q . k is an f64 sum of exact f64 products of the f32 inputs, rounded to
// f32 once; scale, mask, the online softmax and the exponentials (ex2.approx.ftz, log2(e) folded
// as in flash_attention_f32.cu) are flash_attention_f32.cu's, in f32; the weights (f32, exact in
// f64) times v are summed in f64 with the row sums and the rescaling, and the output divided and
// rounded to f32 once. So fewer roundings than flash_attention_f32.cu (other bits, closer to the
// float64 reference). Masked rows as there: a row whose keys are all -inf is NaN.
//
// Design: one block of 128 threads (4 warps) per 64 query rows of one (b, h), each warp 16 rows
// against each 64-key tile. Per tile a warp computes its 16 x 64 scores as 8 x 4 mma.sync
// m16n8k16 (f64) with q and k fragments read from shared memory and widened, takes the softmax
// on the accumulators in registers (lane (g, t) holds rows g, g + 8, keys 2t, 2t + 1 of each 8;
// the row's max and sum across its 4 lanes by shuffles), and adds p @ v as 4 x 8 more mma with
// the weights as the A fragments straight from those registers: the mma's k order is permuted so
// that hardware k t + 4i of a 16-key step is the key its lane already holds (2t, 2t + 1, 8 + 2t,
// 9 + 2t), and v's fragment reads the same keys. q and k fragments are float4 reads of their
// rows (k order 4t + i, as gemm_f32_f64acc.cu); q and k rows are 64 floats with the 16-byte chunks
// of odd rows' halves swapped, v rows 68 floats: both free of bank conflicts. k and v tiles are
// double-buffered (cp.async, zero-filled past the ends; element copies where q, k, v are not
// 16-byte aligned), one __syncthreads a tile. Rows past Sq are zeros and not stored; keys past
// Sk are zeros, masked with -inf; a causal block stops at its last row's diagonal tile.

#include "attention_f32.cuh"
#include "mma_f64.cuh"

namespace flash_attention_f32_f64acc {

using namespace attention_f32;

constexpr int D = 64;
constexpr int BQ = 64;  // query rows a block
constexpr int BK = 64;  // keys a tile
constexpr int THREADS = 128;
constexpr int QK_PITCH = D;      // floats; chunks swizzled (chunk_at)
constexpr int V_PITCH = D + 4;   // a v fragment's 32 reads (rows 2t + const, columns g) hit 32 banks
constexpr int K_OFF = BQ * QK_PITCH, V_OFF = K_OFF + 2 * BK * QK_PITCH;
constexpr int SHARED_BYTES = (V_OFF + 2 * BK * V_PITCH) * 4;
static_assert(SHARED_BYTES == 83968, "flash_attention_f32_f64acc.toml's shared_memory");

// Where a q or k row's 16-byte chunk lies: odd rows swap their halves' chunks (XOR 4), so that a
// fragment read phase (rows g and g + 1, chunks t of one half) covers the 32 banks once.
__device__ __forceinline__ int chunk_at(int row, int chunk) { return chunk ^ ((row & 1) << 2); }

// tile rows r = 0 .. ROWS - 1 from src[(r0 + r) * pitch ..], zeros where r0 + r >= limit: q or k
// rows (pitch QK_PITCH, chunks swizzled) or v rows (pitch V_PITCH).
template <int ROWS, bool QK>
__device__ __forceinline__ void load_rows(float* tile, const float* src, long pitch, int r0, int limit, bool async) {
  constexpr int ROW_CHUNKS = D / 4;
  static_assert(ROWS * ROW_CHUNKS % THREADS == 0, "every thread copies the same number of chunks");
#pragma unroll 1  // a loop, not 8 copies: their addresses, kept across the key loop, would take registers
  for (int n = 0; n < ROWS * ROW_CHUNKS / THREADS; ++n) {
    const int i = threadIdx.x + n * THREADS, r = i / ROW_CHUNKS, c = i % ROW_CHUNKS;
    const bool in = r0 + r < limit;
    float* dst = QK ? tile + r * QK_PITCH + chunk_at(r, c) * 4 : tile + r * V_PITCH + c * 4;
    const float* s = src + (r0 + r) * pitch + c * 4;
    if (async) {
      cp_async16(dst, in ? s : src, in);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) dst[e] = in ? s[e] : 0.0f;
    }
  }
}

template <Masking MASKING, Layout LAYOUT>
__device__ __forceinline__ void forward(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                                        const float* __restrict__ mask, float* __restrict__ out, int Hq, int Hkv, int Sq, int Sk, int MB,
                                        int MH, int MQ, float scale) {
  extern __shared__ __align__(16) float shared[];
  float* qs = shared;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
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

  load_rows<BQ, true>(qs, qh, q_pitch, q0, Sq, async);
  load_rows<BK, true>(shared + K_OFF, kh, kv_pitch, 0, Sk, async);
  load_rows<BK, false>(shared + V_OFF, vh, kv_pitch, 0, Sk, async);
  cp_async_commit();

  // As flash_attention_f32.cu: scores in log2 units without a mask, in natural units with one.
  const float score_scale = MASKING == ADDITIVE ? scale : scale * LOG2E;
  const float unit = MASKING == ADDITIVE ? LOG2E : 1.0f;
  const int row0 = q0 + warp * 16 + g;  // this lane's rows: row0 and row0 + 8 (half 0 and 1)
  double o[D / 8][4];                   // o[nd][2 half + e]: row half, column 8 nd + 2t + e
  float m[2] = {-INFINITY, -INFINITY};
  double l[2] = {0.0, 0.0};             // this lane's part of the row sums
#pragma unroll
  for (int nd = 0; nd < D / 8; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0;

  for (int tile = 0; tile < k_tiles; ++tile) {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();  // this tile has landed, everyone's; every thread is done with the previous one
    const int k0 = tile * BK;
    if (tile + 1 < k_tiles) {
      const int next = (tile + 1) & 1;
      load_rows<BK, true>(shared + K_OFF + next * BK * QK_PITCH, kh, kv_pitch, k0 + BK, Sk, async);
      load_rows<BK, false>(shared + V_OFF + next * BK * V_PITCH, vh, kv_pitch, k0 + BK, Sk, async);
    }
    cp_async_commit();
    const float* ks = shared + K_OFF + (tile & 1) * BK * QK_PITCH;
    const float* vs = shared + V_OFF + (tile & 1) * BK * V_PITCH;

    // The scores, scaled and masked, in f32 (p[ni][2 half + e]: row half, key 8 ni + 2t + e), then
    // the weights. Summed in f64 half a tile at a time: 16 f64 accumulators fewer a lane.
    float p[BK / 8][4];
#pragma unroll
    for (int key_half = 0; key_half < 2; ++key_half) {
      double s[BK / 16][4];
#pragma unroll
      for (int ni = 0; ni < BK / 16; ++ni) s[ni][0] = s[ni][1] = s[ni][2] = s[ni][3] = 0.0;
#pragma unroll
      for (int j = 0; j < D / 16; ++j) {
        const int r = warp * 16 + g;
        const float4 top = *reinterpret_cast<const float4*>(qs + r * QK_PITCH + chunk_at(r, 4 * j + t) * 4);
        const float4 bottom = *reinterpret_cast<const float4*>(qs + (r + 8) * QK_PITCH + chunk_at(r + 8, 4 * j + t) * 4);
        const double af[8] = {top.x, bottom.x, top.y, bottom.y, top.z, bottom.z, top.w, bottom.w};
#pragma unroll
        for (int ni = 0; ni < BK / 16; ++ni) {
          const int key = (key_half * BK / 16 + ni) * 8 + g;
          const float4 kv = *reinterpret_cast<const float4*>(ks + key * QK_PITCH + chunk_at(key, 4 * j + t) * 4);
          const double bf[4] = {kv.x, kv.y, kv.z, kv.w};
          mma_m16n8k16_f64(s[ni], af, bf);
        }
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row0 + 8 * half;
        const float* mrow = MASKING == ADDITIVE ? mslice + static_cast<long>(min(row, MQ - 1)) * Sk : nullptr;
#pragma unroll
        for (int ni = 0; ni < BK / 16; ++ni)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = k0 + (key_half * BK / 16 + ni) * 8 + 2 * t + e;
            float x = static_cast<float>(s[ni][2 * half + e]) * score_scale;
            if (MASKING == ADDITIVE) x = key < Sk ? x + __ldg(mrow + key) : -INFINITY;
            else if (key >= Sk || (MASKING == CAUSAL && key > row)) x = -INFINITY;
            p[key_half * BK / 16 + ni][2 * half + e] = x;
          }
      }
    }

#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx = -INFINITY;
#pragma unroll
      for (int ni = 0; ni < BK / 8; ++ni) mx = fmaxf(mx, fmaxf(p[ni][2 * half], p[ni][2 * half + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // the row's 4 lanes
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[half], mx);
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // all -inf so far: weights 0, not NaN
      const float alpha = ex2((m[half] - base) * unit);
      double sum = 0.0;
#pragma unroll
      for (int ni = 0; ni < BK / 8; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float w = ex2((p[ni][2 * half + e] - base) * unit);
          p[ni][2 * half + e] = w;
          sum += w;
        }
      m[half] = m_new;
      l[half] = l[half] * alpha + sum;
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd) o[nd][2 * half] *= alpha, o[nd][2 * half + 1] *= alpha;
    }

    // o += p @ v, 16 keys a step: this lane's weights are keys 16j + {2t, 2t + 1, 8 + 2t, 9 + 2t}.
#pragma unroll
    for (int j = 0; j < BK / 16; ++j) {
      const double af[8] = {p[2 * j][0], p[2 * j][2], p[2 * j][1], p[2 * j][3], p[2 * j + 1][0], p[2 * j + 1][2], p[2 * j + 1][1], p[2 * j + 1][3]};
      const float* v0 = vs + (16 * j + 2 * t) * V_PITCH + g;
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd) {
        const double bf[4] = {v0[8 * nd], v0[V_PITCH + 8 * nd], v0[8 * V_PITCH + 8 * nd], v0[9 * V_PITCH + 8 * nd]};
        mma_m16n8k16_f64(o[nd], af, bf);
      }
    }
  }

  // Divide by the row sums and store rows < Sq. A row of only -inf keys has l = 0: 0 / 0 is NaN,
  // as torch.
  const bool pairs = (reinterpret_cast<uintptr_t>(out) & 7) == 0;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    double sum = l[half];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = row0 + 8 * half;
    if (row >= Sq) continue;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
      float* dst = oh + row * out_pitch + 8 * nd + 2 * t;
      const float x = static_cast<float>(o[nd][2 * half] / sum), y = static_cast<float>(o[nd][2 * half + 1] / sum);
      if (pairs) {
        *reinterpret_cast<float2*>(dst) = make_float2(x, y);
      } else {
        dst[0] = x, dst[1] = y;
      }
    }
  }
}

}  // namespace flash_attention_f32_f64acc

using flash_attention_f32_f64acc::forward;
using namespace attention_f32;

// The entry points: flash_attention_f32.cu's d64 ones with _f64acc: flash_attn_f32_f64acc_d64[_causal
// | _mask] ([B, H, S, D]), flash_attn_bshd_f32_f64acc_d64[...] ([B, S, H, D]) and
// flash_attn_qkv_f32_f64acc_d64[...] (qkv [B, S, 3, H, D] -> out [B, S, H, D]), with their
// arguments. Launch: 128 threads, grid (B * Hq, ceildiv(Sq, 64)), 83968 bytes of dynamic shared
// memory; two blocks per SM (255 registers a thread).
#define FA64_BOUNDS __launch_bounds__(128, 2)

extern "C" __global__ void FA64_BOUNDS flash_attn_f32_f64acc_d64(const float* q, const float* k, const float* v, float* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<NONE, HEADS>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void FA64_BOUNDS flash_attn_f32_f64acc_d64_causal(const float* q, const float* k, const float* v, float* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<CAUSAL, HEADS>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void FA64_BOUNDS flash_attn_f32_f64acc_d64_mask(const float* q, const float* k, const float* v, const float* mask, float* out, int B, int Hq, int Hkv, int Sq, int Sk, int MB, int MH, int MQ, float scale) {
  forward<ADDITIVE, HEADS>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale);
}
extern "C" __global__ void FA64_BOUNDS flash_attn_bshd_f32_f64acc_d64(const float* q, const float* k, const float* v, float* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<NONE, BSHD>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void FA64_BOUNDS flash_attn_bshd_f32_f64acc_d64_causal(const float* q, const float* k, const float* v, float* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<CAUSAL, BSHD>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void FA64_BOUNDS flash_attn_bshd_f32_f64acc_d64_mask(const float* q, const float* k, const float* v, const float* mask, float* out, int B, int Hq, int Hkv, int Sq, int Sk, int MB, int MH, int MQ, float scale) {
  forward<ADDITIVE, BSHD>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale);
}
extern "C" __global__ void FA64_BOUNDS flash_attn_qkv_f32_f64acc_d64(const float* qkv, float* out, int B, int S, int H, float scale) {
  forward<NONE, QKV>(qkv, qkv + static_cast<long>(H) * 64, qkv + 2 * static_cast<long>(H) * 64, nullptr, out, H, H, S, S, 1, 1, 1, scale);
}
extern "C" __global__ void FA64_BOUNDS flash_attn_qkv_f32_f64acc_d64_causal(const float* qkv, float* out, int B, int S, int H, float scale) {
  forward<CAUSAL, QKV>(qkv, qkv + static_cast<long>(H) * 64, qkv + 2 * static_cast<long>(H) * 64, nullptr, out, H, H, S, S, 1, 1, 1, scale);
}
extern "C" __global__ void FA64_BOUNDS flash_attn_qkv_f32_f64acc_d64_mask(const float* qkv, const float* mask, float* out, int B, int S, int H, int MB, int MH, int MQ, float scale) {
  forward<ADDITIVE, QKV>(qkv, qkv + static_cast<long>(H) * 64, qkv + 2 * static_cast<long>(H) * 64, mask, out, H, H, S, S, MB, MH, MQ, scale);
}
