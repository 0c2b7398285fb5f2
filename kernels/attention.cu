// Fused attention with an additive mask, bf16 in and out, head_dim 64:
//
//     out[z] = softmax(q[z] @ kt[z] / 8 + mask[z / H]) @ v[z]      (H = Z / B heads per mask)
//
// attention_bf16: q [Z, S, 64], kt [Z, 64, S] (the keys already transposed: the operand a
// model's scores batch matmul takes), v [Z, S, 64], mask [B, S, S] (added to the scaled scores,
// shared by the H heads of one batch entry), out [Z, S, 64]. Z = batch * heads; S any size >= 1.
// attention_qkv_bf16: the same on the layouts a transformer has around attention, so that no
// transpose is computed: qkv [B, S, 3, H, 64] (the qkv projection's [B, S, 3 * H * 64] result;
// head h of entry b reads q, k, v at [b, s, 0..2, h]), mask [B, S, S], out [B, S, H, 64] (the
// output projection's [B * S, H * 64] input). The scale is 1/sqrt(64) = 0.125, built in. This is
// eager attention as transformers' GPT-2 exports it: batch matmul, * 0.125, + the [B, 1, S, S]
// attention mask (its causal part included), softmax over the keys, batch matmul with v.
//
// Numerics: scores are accumulated in f32 (bf16 tensor cores, mma.sync m16n8k16), scaled and
// masked in f32, the softmax is an online softmax in f32 (running row max and sum, the output
// rescaled when the max grows), the probabilities are rounded to bf16 for the second product
// (accumulated in f32), and the result is divided by the row sum and rounded to bf16 once.
// A row whose keys are all masked with a finite minimum (torch.finfo(bf16).min) gets the mean
// of v over its keys, as the model's softmax gives (every score equals the mask value); a row
// masked entirely with -inf gets NaN, as torch's softmax does.
//
// Layout of the work: one block of 4 warps per 64 query rows of one z (grid x: z, grid y: the
// query tile, heaviest first), each warp owns 16 rows. Key tiles of 64: the block stages the
// mask tile, kt tile and v tile in shared memory (rows padded to 72 elements: 16-byte aligned,
// ldmatrix without bank conflicts; the key tile as [d][key] from kt, as [key][d] from qkv, each
// read by ldmatrix into the same B fragments); each warp computes its 16 x 64 scores with 32 mma.sync,
// updates its running max and sum, and adds p @ v with 32 more (p stays in registers: the
// score accumulators' layout is the A operand's). Keys and rows past S are zero-filled (keys
// get a -inf mask, so they weigh nothing); out-of-range rows are not stored.
//
// Masked-out tiles are skipped: a key tile whose mask values are all <= -1e30 for every row of
// the block (every row < S), where every such row has already seen a key with a mask above -1e30
// in an earlier tile, is not loaded nor computed. Such keys would weigh exp(<= -1e30 + ...) = 0
// against that row's running max, so skipping them changes nothing (for scores below 1e29 in
// magnitude); with a causal mask, the tiles above the diagonal are skipped (about half the work).
// A fully masked row is never skipped, so it still averages v as above.
//
// Loads are 16-byte vectors where the pointer is 16-byte aligned (IREE bindings are only
// element-aligned) and, for kt and mask, S is a multiple of 8 (for qkv rows, always: a row is a
// multiple of 192 elements); otherwise element by element.

#include <cstdint>
#include <cuda_bf16.h>

#include "mma_bf16.cuh"

namespace attention {

constexpr int D = 64;        // head dim
constexpr int BQ = 64;       // query rows per block, 16 per warp
constexpr int BK = 64;       // keys per tile
constexpr int PITCH = 72;    // shared-memory row pitch in elements (144 bytes)
constexpr int THREADS = 128;
constexpr float SCALE = 0.125f;  // 1 / sqrt(D)
constexpr float LOG2E = 1.4426950408889634f;
constexpr float DEAD = -1e30f;   // a mask value at or below this masks its key out

using namespace mma_bf16;  // bf16, smem, ldmatrix, mma

__device__ __forceinline__ unsigned pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo
  return *reinterpret_cast<unsigned*>(&v);
}

// tile[r][c] = src[r * stride + c] for r < rows, c < cols; 0 elsewhere. 64 x 64 elements, 128 threads.
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* src, int rows, int cols, long stride, bool vec) {
  const bf16 zero = __float2bfloat16(0.0f);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int i = threadIdx.x + j * THREADS;  // 512 chunks of 8 elements
    const int r = i >> 3, c = (i & 7) * 8;
    bf16* dst = tile + r * PITCH + c;
    if (vec) {  // cols is a multiple of 8 here: a chunk is wholly in or out
      uint4 x = make_uint4(0, 0, 0, 0);
      if (r < rows && c < cols) x = *reinterpret_cast<const uint4*>(src + r * stride + c);
      *reinterpret_cast<uint4*>(dst) = x;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = (r < rows && c + e < cols) ? src[r * stride + c + e] : zero;
    }
  }
}

// One block's work: query rows q0 .. q0 + 63 of one head. Row s of the head's q, v (and k when
// the keys are not transposed) starts at qz/vz/kz + s * stride, 64 contiguous elements; with
// KEYS_TRANSPOSED the keys are kt [64, S] at kz (row d at kz + d * S). Row s of the output starts
// at oz + s * out_stride; mb is the head's [S, S] mask.
template <bool KEYS_TRANSPOSED>
__device__ __forceinline__ void attend(const bf16* __restrict__ qz, const bf16* __restrict__ kz, const bf16* __restrict__ vz,
                                       const bf16* __restrict__ mb, bf16* __restrict__ oz, long stride, long out_stride, int S) {
  __shared__ __align__(16) bf16 sQ[BQ * PITCH];
  __shared__ __align__(16) bf16 sK[D * PITCH];   // key tile: [d][key] (transposed keys) or [key][d]
  __shared__ __align__(16) bf16 sV[BK * PITCH];  // v tile: [key][d]
  __shared__ __align__(16) bf16 sM[BQ * PITCH];  // mask tile: [row][key]

  const int tiles = (S + BQ - 1) / BQ;
  const int q0 = (tiles - 1 - static_cast<int>(blockIdx.y)) * BQ;  // the longest rows (most keys to a causal mask) first
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;

  const bool rows_vec_q = aligned16(qz) && (stride & 7) == 0, rows_vec_v = aligned16(vz) && (stride & 7) == 0;
  const bool vec_k = KEYS_TRANSPOSED ? aligned16(kz) && (S & 7) == 0 : aligned16(kz) && (stride & 7) == 0;
  const bool cols_vec_m = aligned16(mb) && (S & 7) == 0;

  // Q: this warp's 16 rows as A fragments, 4 chunks of 16 along d.
  load_tile(sQ, qz + q0 * stride, S - q0, D, stride, rows_vec_q);
  __syncthreads();
  unsigned qa[4][4];
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) ldsm_x4(qa[kc], sQ + (warp * 16 + (lane & 15)) * PITCH + kc * 16 + (lane >> 4) * 8);

  float o[8][4];
#pragma unroll
  for (int i = 0; i < 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY;  // running max of rows g and g + 8
  float l0 = 0.0f, l1 = 0.0f;            // this thread's part of their running sums

  // The mask tile's loader: thread t stages row t / 2, keys (t % 2) * 32 .. + 32, and tracks
  // whether that row has met a live key (a mask above DEAD) in an earlier tile.
  const int mrow = threadIdx.x >> 1, mcol = (threadIdx.x & 1) * 32;
  bool seen = q0 + mrow >= S;  // rows past S don't hold a tile back

  const float neg_inf = -INFINITY;
  const bf16 bneg_inf = __float2bfloat16(neg_inf), bzero = __float2bfloat16(0.0f);
  for (int k0 = 0; k0 < S; k0 += BK) {
    __syncthreads();  // the previous tile's shared memory is read
    // Mask tile: rows past S get 0, keys past S get -inf.
    bool dead = true, live = false;
    {
      const bool row_in = q0 + mrow < S;
      const bf16* src = mb + static_cast<long>(q0 + mrow) * S + k0 + mcol;
      bf16* dst = sM + mrow * PITCH + mcol;
      const int cols = S - k0 - mcol;  // keys of this half inside S
      if (row_in && cols_vec_m) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint4 x;
          if (j * 8 < cols) {
            x = *reinterpret_cast<const uint4*>(src + j * 8);
          } else {
            const unsigned ni = static_cast<unsigned>(__bfloat16_as_ushort(bneg_inf));
            x = make_uint4(ni | ni << 16, ni | ni << 16, ni | ni << 16, ni | ni << 16);
          }
          *reinterpret_cast<uint4*>(dst + j * 8) = x;
          const bf16* e = reinterpret_cast<const bf16*>(&x);
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const bool in = j * 8 + i < cols;
            const float f = __bfloat162float(e[i]);
            dead = dead && (!in || f <= DEAD);
            live = live || (in && f > DEAD);
          }
        }
      } else {
#pragma unroll 8
        for (int i = 0; i < 32; ++i) {
          const bool in = i < cols;
          bf16 x = !row_in ? bzero : (in ? src[i] : bneg_inf);
          dst[i] = x;
          const float f = __bfloat162float(x);
          dead = dead && (!row_in || !in || f <= DEAD);
          live = live || (row_in && in && f > DEAD);
        }
      }
    }
    // Both shuffles run in every lane (no short-circuit): a lane that skipped one would leave
    // its partner waiting in it forever.
    const bool partner_live = __shfl_xor_sync(0xffffffffu, live, 1);
    const bool partner_dead = __shfl_xor_sync(0xffffffffu, dead, 1);
    const bool row_live = live || partner_live;
    const bool row_dead = dead && partner_dead;
    const bool skip = __syncthreads_and(row_dead && seen);
    seen = seen || row_live;
    if (skip) continue;  // uniform across the block

    if (KEYS_TRANSPOSED) {
      load_tile(sK, kz + k0, D, S - k0, S, vec_k);  // [d][key]
    } else {
      load_tile(sK, kz + k0 * stride, S - k0, D, stride, vec_k);  // [key][d]
    }
    load_tile(sV, vz + k0 * stride, S - k0, D, stride, rows_vec_v);
    __syncthreads();

    // Scores: 16 rows x 64 keys per warp, 8 accumulators of 16 x 8.
    float s[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        // B fragments of keys 16np .. 16np + 15 (two n8 tiles), d 16kc .. 16kc + 15: from [d][key]
        // transposed by ldmatrix; from [key][d] as stored, lanes 8-15 and 24-31 giving d + 8.
        unsigned bk[4];
        if (KEYS_TRANSPOSED) {
          ldsm_x4_trans(bk, sK + (kc * 16 + (lane & 15)) * PITCH + np * 16 + (lane >> 4) * 8);
        } else {
          ldsm_x4(bk, sK + (np * 16 + (lane & 7) + (lane >> 4) * 8) * PITCH + kc * 16 + ((lane >> 3) & 1) * 8);
        }
        mma(s[2 * np], qa[kc], bk[0], bk[1]);
        mma(s[2 * np + 1], qa[kc], bk[2], bk[3]);
      }
    }

    // Scale, mask, online softmax. Accumulator i holds rows g (0, 1) and g + 8 (2, 3), keys 8i + 2c, + 1.
    const bf16* mr0 = sM + (warp * 16 + g) * PITCH + 2 * c;
    const bf16* mr1 = mr0 + 8 * PITCH;
    float mx0 = neg_inf, mx1 = neg_inf;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      s[i][0] = fmaf(s[i][0], SCALE, __bfloat162float(mr0[8 * i]));
      s[i][1] = fmaf(s[i][1], SCALE, __bfloat162float(mr0[8 * i + 1]));
      s[i][2] = fmaf(s[i][2], SCALE, __bfloat162float(mr1[8 * i]));
      s[i][3] = fmaf(s[i][3], SCALE, __bfloat162float(mr1[8 * i + 1]));
      mx0 = fmaxf(mx0, fmaxf(s[i][0], s[i][1]));
      mx1 = fmaxf(mx1, fmaxf(s[i][2], s[i][3]));
    }
#pragma unroll
    for (int d = 1; d <= 2; d <<= 1) {  // the 4 threads of a row
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, d));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, d));
    }
    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
    const float u0 = n0 == neg_inf ? 0.0f : n0, u1 = n1 == neg_inf ? 0.0f : n1;  // all -inf so far: weights 0, not NaN
    const float a0 = exp2f((m0 - u0) * LOG2E), a1 = exp2f((m1 - u1) * LOG2E);
    m0 = n0;
    m1 = n1;
    float r0 = 0.0f, r1 = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      s[i][0] = exp2f((s[i][0] - u0) * LOG2E);
      s[i][1] = exp2f((s[i][1] - u0) * LOG2E);
      s[i][2] = exp2f((s[i][2] - u1) * LOG2E);
      s[i][3] = exp2f((s[i][3] - u1) * LOG2E);
      r0 += s[i][0] + s[i][1];
      r1 += s[i][2] + s[i][3];
    }
    l0 = l0 * a0 + r0;
    l1 = l1 * a1 + r1;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      o[i][0] *= a0;
      o[i][1] *= a0;
      o[i][2] *= a1;
      o[i][3] *= a1;
    }

    // out += p @ v: p's accumulators 2kc and 2kc + 1 are the A fragment of keys 16kc .. 16kc + 15.
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
      const unsigned pa[4] = {pack(s[2 * kc][0], s[2 * kc][1]), pack(s[2 * kc][2], s[2 * kc][3]), pack(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                              pack(s[2 * kc + 1][2], s[2 * kc + 1][3])};
#pragma unroll
      for (int dp = 0; dp < 4; ++dp) {
        unsigned bv[4];
        ldsm_x4_trans(bv, sV + (kc * 16 + (lane & 15)) * PITCH + dp * 16 + (lane >> 4) * 8);
        mma(o[2 * dp], pa, bv[0], bv[1]);
        mma(o[2 * dp + 1], pa, bv[2], bv[3]);
      }
    }
  }

#pragma unroll
  for (int d = 1; d <= 2; d <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, d);
    l1 += __shfl_xor_sync(0xffffffffu, l1, d);
  }
  const float i0 = 1.0f / l0, i1 = 1.0f / l1;  // a row of only -inf: 0 / 0, NaN as in torch
  const int row0 = q0 + warp * 16 + g, row1 = row0 + 8;
  const bool vec_out = (reinterpret_cast<uintptr_t>(oz) & 3) == 0 && (out_stride & 1) == 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int col = 8 * i + 2 * c;
    const float v00 = o[i][0] * i0, v01 = o[i][1] * i0, v10 = o[i][2] * i1, v11 = o[i][3] * i1;
    if (row0 < S) {
      bf16* p = oz + row0 * out_stride + col;
      if (vec_out) {
        *reinterpret_cast<unsigned*>(p) = pack(v00, v01);
      } else {
        p[0] = __float2bfloat16(v00);
        p[1] = __float2bfloat16(v01);
      }
    }
    if (row1 < S) {
      bf16* p = oz + row1 * out_stride + col;
      if (vec_out) {
        *reinterpret_cast<unsigned*>(p) = pack(v10, v11);
      } else {
        p[0] = __float2bfloat16(v10);
        p[1] = __float2bfloat16(v11);
      }
    }
  }
}

}  // namespace attention

// Both kernels: __launch_bounds__(128, 2) gives ptxas the registers of two blocks per SM; with
// its default it spills on sm_80 or sm_90 (the fragments, accumulators and running sums take
// ~190).

// q [Z, S, 64], kt [Z, 64, S], v [Z, S, 64], mask [B, S, S] -> out [Z, S, 64]: head z uses mask z / (Z / B).
extern "C" __global__ void __launch_bounds__(128, 2) attention_bf16(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kt,
                                                                 const __nv_bfloat16* __restrict__ v, const __nv_bfloat16* __restrict__ mask,
                                                                 __nv_bfloat16* __restrict__ out, int Z, int S, int B) {
  const int z = blockIdx.x;
  if (z >= Z) return;
  const int heads = B > 0 ? Z / B : 1;
  const long head = static_cast<long>(z) * S * attention::D;
  attention::attend<true>(q + head, kt + head, v + head, mask + static_cast<long>(z / heads) * S * S, out + head, attention::D, attention::D, S);
}

// qkv [B, S, 3, H, 64] (a projection's [B, S, 3 * H * 64] result: q, k, v side by side in each
// row), mask [B, S, S] -> out [B, S, H, 64]: the layouts around attention in a transformer, read
// and written in place of the [B * H, S, 64] operands (no transposes). Block x: b * H + h.
extern "C" __global__ void __launch_bounds__(128, 2) attention_qkv_bf16(const __nv_bfloat16* __restrict__ qkv, const __nv_bfloat16* __restrict__ mask,
                                                                     __nv_bfloat16* __restrict__ out, int B, int S, int H) {
  const int z = blockIdx.x;
  if (z >= B * H) return;
  const int b = z / H, h = z % H;
  const long width = static_cast<long>(H) * attention::D;  // E: one of q, k, v in a row
  const __nv_bfloat16* head = qkv + static_cast<long>(b) * S * 3 * width + static_cast<long>(h) * attention::D;
  attention::attend<false>(head, head + width, head + 2 * width, mask + static_cast<long>(b) * S * S,
                           out + static_cast<long>(b) * S * width + static_cast<long>(h) * attention::D, 3 * width, width, S);
}
