// FlashAttention-style forward pass, the computation of torch's scaled_dot_product_attention:
//
//     out[b, h] = softmax(q[b, h] @ k[b, h / G]^T * scale + mask) @ v[b, h / G]      G = Hq / Hkv
//
// q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D], out [B, Hq, Sq, D], all contiguous, bf16 or f16
// (inputs and output of one type; the qkv and bshd entry points read and write the same on the
// layouts a transformer's projections store them in, Layout below). D is 64 or 128. Hkv divides Hq: query head h reads key/value
// head h / (Hq / Hkv) (grouped-query attention; Hkv = 1 is multi-query, Hkv = Hq plain
// multi-head), the repeat is never materialised. Any Sq, Sk >= 1; `scale` is the softmax scale
// (SDPA's default is 1 / sqrt(D)). Three maskings, each its own entry point:
//   - none;
//   - causal, top-left aligned as torch SDPA's is_causal: query i sees keys j <= i (for Sq != Sk
//     too: the last query rows of a short Sk see every key, the keys past Sq are never seen);
//   - additive: mask [MB, MH, MQ, Sk] of the inputs' type, added to the scaled scores, each of
//     MB, MH, MQ either the full size (B, Hq, Sq) or 1 (broadcast, as torch broadcasts a
//     [B, 1, 1, Sk] padding mask). Batch b reads mask batch b % MB, head h mask head h % MH, and
//     query row i mask row min(i, MQ - 1), so no other size can read out of bounds.
// Hq % Hkv != 0 is an error the kernel can't report: it writes NaN everywhere instead.
//
// Numerics: scores accumulate in f32 on the tensor cores (mma.sync m16n8k16); the softmax is an
// online softmax in f32 registers (running row max and sum; the output is rescaled when the
// max grows), its exponentials are exp2 with log2(e) folded into the scale (ex2.approx.ftz:
// ~2 ulp, and a flushed subnormal weight is < 2^-126 of the row's largest, which weighs 1);
// the probabilities are rounded to the input type for p @ v (f32 accumulation), as every
// flash kernel does, and the output is divided by the row sum and rounded once. A row whose
// keys are all masked with -inf gives NaN, as torch does; a finite mask value, however large
// and negative (finfo.min), stays finite: with the additive mask the max and the differences
// are taken in natural-log units before log2(e) is applied, so finfo.min * log2(e) never
// overflows to -inf, and a row masked entirely with one such value averages v as torch does.
//
// Two bodies, one per arch family, with the same launch (Launch: 256 threads per 128 query rows
// of one (b, h); grid x: b * Hq + h, grid y: the query tile, the longest causal rows first):
//
// sm_90a (Hopper): wgmma. Two warpgroups of 64 rows each; q, k and v tiles in shared memory in
// wgmma's 128-byte swizzled layout, copied by cp.async (k and v through a two-stage ring of
// 64-key tiles; a mask with a row per query staged beside them). Per tile a warpgroup computes
// its 64 x 64 scores with wgmma (q and k read from shared memory), masks and softmaxes them in
// registers, and adds p @ v with a wgmma taking p from registers. d64: two blocks per SM (128
// registers a thread). d128 runs its own body where it can (flash_attention_fwd_sm90_tma: TMA
// loads of 128-key tiles through three stages, one block per SM, each warpgroup's softmax
// overlapping its own p @ v), this one otherwise.
//
// sm_80 and newer (Ampere; its PTX elsewhere): mma.sync. Each warp owns MT * 16 consecutive rows
// (WARPS warps per block); their q fragments stay in registers for the whole pass. Key tiles of
// BK = 64 rows of k and v are copied by cp.async into a two-stage shared-memory ring (rows padded
// to D + 8 elements: ldmatrix without bank conflicts), the next tile's copy overlapping this
// tile's math. Per tile a warp computes its scores (ldmatrix + mma.sync; each k fragment serves
// the warp's MT row tiles), masks, updates the running max and sum, and adds p @ v with p taken
// straight from the score accumulators (their layout is the A operand's).
//
// Both: causal, a block stops at its last row's diagonal tile, a warp (sm_90a: a warpgroup)
// skips the tiles wholly above its rows, and only the tiles crossing a warp's diagonal compute
// the element-wise rule. Rows past Sq are zero-filled
// and not stored; keys past Sk are zero-filled and masked with -inf.
//
// Pointers that are not 16-byte aligned (IREE bindings are only element-aligned) take an
// element-by-element copy into shared memory instead of cp.async; the math is the same.

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "sm90_pipeline.cuh"

namespace flash_attention {

enum Masking { NONE, CAUSAL, ADDITIVE };

constexpr int BK = 64;  // keys per tile
constexpr float LOG2E = 1.4426950408889634f;

// The element type's conversions and tensor-core instruction.
template <typename T>
struct Elem;

template <>
struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ unsigned pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo
    return *reinterpret_cast<unsigned*>(&v);
  }
  static __device__ __forceinline__ float2 unpack(unsigned u) { return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&u)); }
  static __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16(x); }
  // c += a (16 x 16, row) @ b (16 x 8, col), f32 accumulators.
  static __device__ __forceinline__ void mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct Elem<__half> {
  static __device__ __forceinline__ unsigned pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&v);
  }
  static __device__ __forceinline__ float2 unpack(unsigned u) { return __half22float2(*reinterpret_cast<__half2*>(&u)); }
  static __device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
  static __device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
  static __device__ __forceinline__ void mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ unsigned smem(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem(p)));
}

__device__ __forceinline__ void ldsm_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem(p)));
}

// 16 bytes global -> shared, asynchronously; with `valid` false the 16 bytes are zeros and
// nothing is read.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem(dst)), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// tile[r][c] = src[(r0 + r) * stride + c] for r0 + r < limit, zeros past it: ROWS rows of D
// elements, row pitch D + 8.
template <typename T, int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_rows(T* tile, const T* src, long stride, int r0, int limit, bool async) {
  constexpr int CHUNKS_PER_ROW = D / 8, CHUNKS = ROWS * CHUNKS_PER_ROW, PITCH = D + 8;
  static_assert(CHUNKS % THREADS == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int j = 0; j < CHUNKS / THREADS; ++j) {
    const int i = threadIdx.x + j * THREADS;
    const int r = i / CHUNKS_PER_ROW, c = (i % CHUNKS_PER_ROW) * 8;
    const bool in = r0 + r < limit;
    T* dst = tile + r * PITCH + c;
    const T* s = src + static_cast<long>(r0 + r) * stride + c;
    if (async) {
      cp_async16(dst, in ? s : src, in);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = in ? s[e] : Elem<T>::from_float(0.0f);
    }
  }
}

// The steps both bodies share, on one 16-row tile of a warp: rows row_base + g and row_base + g
// + 8 of accumulator n, keys k0 + 8n + 2c and + 1 (mma.sync's m16n8 layout, and each warp's
// part of wgmma's m64 layout).

// Where the additive mask is read: this (b, h)'s [MQ, Sk] slice, and whether pairs of keys can
// be read as one 4-byte load.
template <typename T>
struct MaskView {
  const T* slice;
  int MQ;
  bool pairs;
};

// A block's mask tile staged in shared memory: its rows MASK_PITCH elements apart (64 keys + 8:
// the 8 rows of a warp's quads then read distinct banks).
constexpr int MASK_PITCH = BK + 8;

// Scale and mask the scores of NK keys from k0: the additive mask, the causal rule (only where
// the tile crosses the diagonal of these rows), and -inf for keys past Sk. `staged`, when not
// null, is the mask tile in shared memory (keys k0 .., row_base's row first), read instead of
// global memory.
template <typename T, Masking MASKING, int NK = BK>
__device__ __forceinline__ void scale_and_mask(float (&s)[NK / 8][4], int row_base, int k0, int Sk, float score_scale, MaskView<T> mask,
                                               const T* staged = nullptr) {
  using E = Elem<T>;
  const int g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
  const bool key_tail = k0 + NK > Sk;
  const bool diagonal = MASKING == CAUSAL && k0 + NK - 1 > row_base;  // some key of the tile is after some row
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row_base + g + 8 * half;
    // The mask row from key 0 (mrow[key]): in global memory, or in the staged tile (keys from k0).
    const T* mrow = nullptr;
    if (MASKING == ADDITIVE) mrow = staged ? staged + (g + 8 * half) * MASK_PITCH - k0 : mask.slice + static_cast<long>(min(row, mask.MQ - 1)) * Sk;
#pragma unroll
    for (int n = 0; n < NK / 8; ++n) {
      const int key = k0 + 8 * n + 2 * c;
      float x0 = s[n][2 * half] * score_scale, x1 = s[n][2 * half + 1] * score_scale;
      if (MASKING == ADDITIVE) {
        float a0 = -INFINITY, a1 = -INFINITY;  // keys past Sk
        if (mask.pairs || staged) {
          if (key < Sk) {
            const float2 pair = E::unpack(*reinterpret_cast<const unsigned*>(mrow + key));  // a generic load: shared or global
            a0 = pair.x, a1 = pair.y;
          }
        } else {
          if (key < Sk) a0 = E::to_float(mrow[key]);
          if (key + 1 < Sk) a1 = E::to_float(mrow[key + 1]);
        }
        x0 += a0, x1 += a1;
      } else {
        if ((key_tail && key >= Sk) || (diagonal && key > row)) x0 = -INFINITY;
        if ((key_tail && key + 1 >= Sk) || (diagonal && key + 1 > row)) x1 = -INFINITY;
      }
      s[n][2 * half] = x0, s[n][2 * half + 1] = x1;
    }
  }
}

// Online softmax of NK keys' scores: the new row max, weights in place of the scores, the
// running sum, and alpha, the factor the outputs so far are to be rescaled by. m is in log2
// units without a mask, in natural units with one. Without a mask the scores may come unscaled
// with `pre` > 0 their scale (the max of s * pre is pre * the max of s; each weight one FMA and
// an exp2); with one, pre is 1.
template <Masking MASKING, int NK = BK>
__device__ __forceinline__ void softmax_weights(float (&s)[NK / 8][4], float (&m)[2], float (&l)[2], float (&alpha)[2], float pre = 1.0f) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < NK / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * half], s[n][2 * half + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // the 4 threads of a row
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[half], mx * pre);
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // all -inf so far: weights 0, not NaN
    // With the mask, differences first, then log2(e): finfo.min * log2(e) would overflow.
    const float unit = MASKING == ADDITIVE ? LOG2E : 1.0f;
    alpha[half] = ex2((m[half] - base) * unit);
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < NK / 8; ++n) {
      float& p0 = s[n][2 * half];
      float& p1 = s[n][2 * half + 1];
      if (MASKING == ADDITIVE) p0 = ex2((p0 - base) * unit), p1 = ex2((p1 - base) * unit);
      else p0 = ex2(fmaf(p0, pre, -base)), p1 = ex2(fmaf(p1, pre, -base));
      sum += p0 + p1;
    }
    m[half] = m_new;
    l[half] = l[half] * alpha[half] + sum;
  }
}

template <int D>
__device__ __forceinline__ void rescale(float (&o)[D / 8][4], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] *= alpha[0], o[i][1] *= alpha[0], o[i][2] *= alpha[1], o[i][3] *= alpha[1];
}

// softmax_weights of 64 keys and the outputs rescaled at once.
template <Masking MASKING, int D>
__device__ __forceinline__ void online_softmax(float (&s)[BK / 8][4], float (&m)[2], float (&l)[2], float (&o)[D / 8][4]) {
  float alpha[2];
  softmax_weights<MASKING>(s, m, l, alpha);
  rescale<D>(o, alpha);
}

// The weights of keys 16kc .. 16kc + 15 as an A fragment: accumulators 2kc and 2kc + 1.
template <typename T, int NK = BK>
__device__ __forceinline__ void weights_fragment(unsigned (&pa)[4], const float (&s)[NK / 8][4], int kc) {
  pa[0] = Elem<T>::pack(s[2 * kc][0], s[2 * kc][1]);
  pa[1] = Elem<T>::pack(s[2 * kc][2], s[2 * kc][3]);
  pa[2] = Elem<T>::pack(s[2 * kc + 1][0], s[2 * kc + 1][1]);
  pa[3] = Elem<T>::pack(s[2 * kc + 1][2], s[2 * kc + 1][3]);
}

// Divide by the row sums and store rows < Sq (row r at oh + r * stride): one rounding. A row of
// only -inf keys has l = 0: 0 * (1 / 0) is NaN, as torch.
template <typename T, int D>
__device__ __forceinline__ void store_rows(T* oh, long stride, const float (&o)[D / 8][4], const float (&l)[2], int row_base, int Sq,
                                           bool pairs_out) {
  const int g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = l[half];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = 1.0f / sum;
    const int row = row_base + g + 8 * half;
    if (row >= Sq) continue;
    T* dst = oh + static_cast<long>(row) * stride + 2 * c;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const float y0 = o[i][2 * half] * inv, y1 = o[i][2 * half + 1] * inv;
      if (pairs_out) {
        *reinterpret_cast<unsigned*>(dst + 8 * i) = Elem<T>::pack(y0, y1);
      } else {
        dst[8 * i] = Elem<T>::from_float(y0);
        dst[8 * i + 1] = Elem<T>::from_float(y1);
      }
    }
  }
}

// Where q, k, v and out are: HEADS, the [B, H, S, D] tensors of SDPA (each head's rows
// contiguous, D apart); QKV, one [B, S, 3, H, D] tensor (a qkv projection's [B, S, 3E] result
// as stored, E = H * D: row s of head h at s * 3E + h * D, k E and v 2E after q; Hq = Hkv = H,
// Sq = Sk = S) and out [B, S, H, D] (row s of head h at s * E + h * D); BSHD, q [B, Sq, Hq, D],
// k and v [B, Sk, Hkv, D] and out [B, Sq, Hq, D], each its own tensor (separate q, k and v
// projections' [B, S, H * D] results as stored: row s of head h at s * H * D + h * D). Rows stay
// 16-byte aligned in all: D * 2, 3E * 2 and H * D * 2 bytes are multiples of 16.
enum Layout { HEADS, QKV, BSHD };

// What a block works on: head h of batch entry b, query rows q0 .. q0 + BQ - 1, and the keys it
// needs (all, or with the causal rule up to its last row's diagonal); rows of q are q_stride
// elements apart, rows of k and v kv_stride (the same but in BSHD with Hkv < Hq), rows of out
// out_stride.
template <typename T>
struct BlockWork {
  const T* qh;
  const T* kh;
  const T* vh;
  T* oh;
  long q_stride, kv_stride, out_stride;
  MaskView<T> mask;
  int q0, k_tiles;
  bool valid;  // Hq % Hkv == 0
};

template <typename T, Masking MASKING, Layout LAYOUT, int BQ, int D>
__device__ __forceinline__ BlockWork<T> block_work(const T* q, const T* k, const T* v, const T* mask, T* out, int Hq, int Hkv, int Sq,
                                                   int Sk, int MB, int MH, int MQ) {
  BlockWork<T> w;
  const int bh = blockIdx.x, b = bh / Hq, h = bh % Hq;
  const int q_tiles = (Sq + BQ - 1) / BQ;
  w.q0 = (q_tiles - 1 - static_cast<int>(blockIdx.y)) * BQ;  // the longest causal rows first
  w.valid = Hkv > 0 && Hq % Hkv == 0;
  if (LAYOUT == QKV) {  // q, k, v: the same rows of one [B, S, 3, H, D] tensor, each from its own base
    const long e = static_cast<long>(Hq) * D, head = static_cast<long>(b) * Sq * 3 * e + static_cast<long>(h) * D;
    w.qh = q + head, w.kh = k + head, w.vh = v + head;
    w.oh = out + static_cast<long>(b) * Sq * e + static_cast<long>(h) * D;
    w.q_stride = w.kv_stride = 3 * e, w.out_stride = e;
  } else if (LAYOUT == BSHD) {  // each head's rows H * D apart in its own tensor, from column h * D
    const int kvh = w.valid ? h / (Hq / Hkv) : 0;
    const long eq = static_cast<long>(Hq) * D, ekv = static_cast<long>(Hkv) * D;
    w.qh = q + static_cast<long>(b) * Sq * eq + static_cast<long>(h) * D;
    w.kh = k + static_cast<long>(b) * Sk * ekv + static_cast<long>(kvh) * D;
    w.vh = v + static_cast<long>(b) * Sk * ekv + static_cast<long>(kvh) * D;
    w.oh = out + static_cast<long>(b) * Sq * eq + static_cast<long>(h) * D;
    w.q_stride = w.out_stride = eq, w.kv_stride = ekv;
  } else {
    const int kvh = w.valid ? h / (Hq / Hkv) : 0;
    w.oh = out + (static_cast<long>(b) * Hq + h) * Sq * D;
    w.qh = q + (static_cast<long>(b) * Hq + h) * Sq * D;
    w.kh = k + (static_cast<long>(b) * Hkv + kvh) * Sk * D;
    w.vh = v + (static_cast<long>(b) * Hkv + kvh) * Sk * D;
    w.q_stride = w.kv_stride = w.out_stride = D;
  }
  const int key_end = MASKING == CAUSAL ? min(Sk, min(Sq, w.q0 + BQ)) : Sk;
  w.k_tiles = (key_end + BK - 1) / BK;
  w.mask = {nullptr, 1, false};
  if (MASKING == ADDITIVE) {
    w.mask.slice = mask + (static_cast<long>(b % MB) * MH + h % MH) * MQ * Sk;
    w.mask.MQ = MQ;
    w.mask.pairs = (reinterpret_cast<uintptr_t>(w.mask.slice) & 3) == 0 && (Sk & 1) == 0;
  }
  return w;
}

// Hq % Hkv != 0: no key/value head to read; NaN rather than an out-of-bounds read. HEADS and
// BSHD: QKV has Hq = Hkv (its blocks are always valid). HEADS rows are contiguous (D apart), BSHD
// rows out_stride apart.
template <typename T, Layout LAYOUT, int BQ, int D>
__device__ __forceinline__ void fill_nan(const BlockWork<T>& w, int Sq) {
  for (int i = threadIdx.x; i < BQ * D; i += blockDim.x) {
    if (w.q0 + i / D >= Sq) continue;
    const long at = LAYOUT == BSHD ? static_cast<long>(w.q0 + i / D) * w.out_stride + i % D : static_cast<long>(w.q0) * D + i;
    w.oh[at] = Elem<T>::from_float(__int_as_float(0x7fc00000));
  }
}

// The mma.sync body (sm_80 and newer): each warp owns MT x 16 consecutive rows, its q fragments
// in registers; k and v tiles in padded rows, read by ldmatrix.
template <typename T, int D, Masking MASKING, Layout LAYOUT, int WARPS, int MT>
__device__ __forceinline__ void flash_attention_fwd(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                                    const T* __restrict__ mask, T* __restrict__ out, int Hq, int Hkv, int Sq, int Sk, int MB,
                                                    int MH, int MQ, float scale) {
  constexpr int BQ = 16 * MT * WARPS, THREADS = 32 * WARPS, PITCH = D + 8;
  constexpr int STAGE = 2 * BK * PITCH;  // elements of one stage: the k tile, then the v tile
  static_assert(BQ * PITCH <= STAGE, "the q tile is staged in the second stage's space");
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* shared = reinterpret_cast<T*>(shared_bytes);
  using E = Elem<T>;

  const BlockWork<T> w = block_work<T, MASKING, LAYOUT, BQ, D>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ);
  if (!w.valid) return fill_nan<T, LAYOUT, BQ, D>(w, Sq);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool async = aligned16(q) && aligned16(k) && aligned16(v);

  // The q tile goes through the second stage's space (free until tile 1 is copied), with tile 0.
  load_rows<T, BQ, D, THREADS>(shared + STAGE, w.qh, w.q_stride, w.q0, Sq, async);
  load_rows<T, BK, D, THREADS>(shared, w.kh, w.kv_stride, 0, Sk, async);
  load_rows<T, BK, D, THREADS>(shared + BK * PITCH, w.vh, w.kv_stride, 0, Sk, async);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  // This warp's rows as A fragments: row tile mt, d chunk kc.
  unsigned qa[MT][D / 16][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc)
      ldsm_x4(qa[mt][kc], shared + STAGE + ((warp * MT + mt) * 16 + (lane & 15)) * PITCH + kc * 16 + (lane >> 4) * 8);

  float o[MT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
  float m[MT][2], l[MT][2];  // running max and this thread's part of the running sum, rows g and g + 8
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;

  const int warp_row0 = w.q0 + warp * MT * 16;  // this warp's first row
  const float score_scale = MASKING == ADDITIVE ? scale : scale * LOG2E;

  for (int t = 0; t < w.k_tiles; ++t) {
    cp_async_wait_all();
    __syncthreads();  // tile t is in place for all; every warp is done with the stage tile t + 1 takes
    if (t + 1 < w.k_tiles) {
      T* next = shared + ((t + 1) & 1) * STAGE;
      load_rows<T, BK, D, THREADS>(next, w.kh, w.kv_stride, (t + 1) * BK, Sk, async);
      load_rows<T, BK, D, THREADS>(next + BK * PITCH, w.vh, w.kv_stride, (t + 1) * BK, Sk, async);
      cp_async_commit();
    }
    const int k0 = t * BK;
    if (MASKING == CAUSAL && k0 > warp_row0 + MT * 16 - 1) continue;  // every key of the tile is after this warp's rows
    const T* sK = shared + (t & 1) * STAGE;
    const T* sV = sK + BK * PITCH;

    // Scores: MT x 16 rows x 64 keys, accumulators s[mt][n] of keys 8n .. 8n + 7.
    float s[MT][BK / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < BK / 8; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
#pragma unroll
      for (int np = 0; np < BK / 16; ++np) {
        // B fragments of keys 16np .. + 15 (two n8 tiles), d 16kc .. + 15, from the [key][d] tile:
        // lanes 8-15 and 24-31 address d + 8, lanes 16-31 keys + 8.
        unsigned kb[4];
        ldsm_x4(kb, sK + (np * 16 + (lane & 7) + (lane >> 4) * 8) * PITCH + kc * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          E::mma(s[mt][2 * np], qa[mt][kc], kb[0], kb[1]);
          E::mma(s[mt][2 * np + 1], qa[mt][kc], kb[2], kb[3]);
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      scale_and_mask<T, MASKING>(s[mt], warp_row0 + mt * 16, k0, Sk, score_scale, w.mask);
      online_softmax<MASKING, D>(s[mt], m[mt], l[mt], o[mt]);
    }

    // out += p @ v, p straight from the score accumulators.
#pragma unroll
    for (int kc = 0; kc < BK / 16; ++kc) {
      unsigned pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) weights_fragment<T>(pa[mt], s[mt], kc);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        unsigned vb[4];
        ldsm_x4_trans(vb, sV + (kc * 16 + (lane & 15)) * PITCH + dp * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          E::mma(o[mt][2 * dp], pa[mt], vb[0], vb[1]);
          E::mma(o[mt][2 * dp + 1], pa[mt], vb[2], vb[3]);
        }
      }
    }
  }

  const bool pairs_out = (reinterpret_cast<uintptr_t>(out) & 3) == 0;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) store_rows<T, D>(w.oh, w.out_stride, o[mt], l[mt], warp_row0 + mt * 16, Sq, pairs_out);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The wgmma body (sm_90a): warpgroups of 4 warps, each owning 64 consecutive rows; q, k and v
// tiles in wgmma's 128-byte swizzled layout, read by the tensor cores from shared memory. Per
// key tile a warpgroup computes its 64 x 64 scores with D / 16 wgmma.m64n64k16 (q and k both
// K-major), masks and softmaxes them in registers (each warp's part of the m64 accumulators has
// the m16n8 layout of the mma.sync body, so the same steps apply), and adds p @ v with
// wgmma.m64nDk16 taking p from registers and v from shared memory (N-major: v as it lies).

// d[8][4] += A(desc) @ B(desc), m64n64k16, A and B K-major (B: keys x d, d contiguous); TY bf16 or f16.
#define FA_DEFINE_WGMMA_QK(NAME, TY) \
  __device__ __forceinline__ void NAME(float (&d)[8][4], uint64_t desc_a, uint64_t desc_b) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n" \
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]) \
                 : "l"(desc_a), "l"(desc_b), "r"(1)); \
  }

// d[8][4] += A(registers) @ B(desc), m64n64k16, B N-major (keys x d, d contiguous: transposed).
#define FA_DEFINE_WGMMA_PV64(NAME, TY) \
  __device__ __forceinline__ void NAME(float (&d)[8][4], const unsigned (&a)[4], uint64_t desc_b) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n" \
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]) \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1)); \
  }

// d[16][4] += A(registers) @ B(desc), m64n128k16, B N-major (keys x d, d contiguous: transposed).
#define FA_DEFINE_WGMMA_PV128(NAME, TY) \
  __device__ __forceinline__ void NAME(float (&d)[16][4], const unsigned (&a)[4], uint64_t desc_b) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n" \
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), \
                   "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), \
                   "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), \
                   "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), \
                   "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]) \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1)); \
  }


// d[16][4] (+)= A(desc) @ B(desc), m64n128k16, A and B K-major (B: 128 keys x d, d contiguous);
// accumulate 0 overwrites d (the first step of a tile's scores: no zeroing of 64 registers).
#define FA_DEFINE_WGMMA_QK128(NAME, TY) \
  __device__ __forceinline__ void NAME(float (&d)[16][4], uint64_t desc_a, uint64_t desc_b, int accumulate) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n" \
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]) \
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate)); \
  }

FA_DEFINE_WGMMA_QK(wgmma_qk_bf16, "bf16")
FA_DEFINE_WGMMA_QK(wgmma_qk_f16, "f16")
FA_DEFINE_WGMMA_PV64(wgmma_pv64_bf16, "bf16")
FA_DEFINE_WGMMA_PV64(wgmma_pv64_f16, "f16")
FA_DEFINE_WGMMA_PV128(wgmma_pv128_bf16, "bf16")
FA_DEFINE_WGMMA_PV128(wgmma_pv128_f16, "f16")
FA_DEFINE_WGMMA_QK128(wgmma_qk128_bf16, "bf16")
FA_DEFINE_WGMMA_QK128(wgmma_qk128_f16, "f16")

template <typename T>
__device__ __forceinline__ void wgmma_qk(float (&d)[8][4], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (__is_same(T, __nv_bfloat16)) wgmma_qk_bf16(d, desc_a, desc_b);
  else wgmma_qk_f16(d, desc_a, desc_b);
}
template <typename T>
__device__ __forceinline__ void wgmma_qk(float (&d)[16][4], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  if constexpr (__is_same(T, __nv_bfloat16)) wgmma_qk128_bf16(d, desc_a, desc_b, accumulate);
  else wgmma_qk128_f16(d, desc_a, desc_b, accumulate);
}
template <typename T>
__device__ __forceinline__ void wgmma_pv(float (&d)[8][4], const unsigned (&a)[4], uint64_t desc_b) {
  if constexpr (__is_same(T, __nv_bfloat16)) wgmma_pv64_bf16(d, a, desc_b);
  else wgmma_pv64_f16(d, a, desc_b);
}
template <typename T>
__device__ __forceinline__ void wgmma_pv(float (&d)[16][4], const unsigned (&a)[4], uint64_t desc_b) {
  if constexpr (__is_same(T, __nv_bfloat16)) wgmma_pv128_bf16(d, a, desc_b);
  else wgmma_pv128_f16(d, a, desc_b);
}

// Pins accumulators in registers across the asynchronous wgmma (as CUTLASS's
// warpgroup_fence_operand): without it ptxas may move them and serialize the wgmmas.
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+f"(d[i][j])::"memory");
}

// wgmma shared-memory matrix descriptor, 128-byte swizzle: start, leading and stride byte
// offsets in 16-byte units, swizzle mode 1 (128-byte) in bits 62-63 (PTX ISA, "Matrix
// Descriptor Format").
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t leading, uint32_t stride) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((leading & 0x3FFFF) >> 4) << 16) | (uint64_t((stride & 0x3FFFF) >> 4) << 32) |
         (uint64_t(1) << 62);
}

// desc advanced by `bytes` (its start address field, in 16-byte units, is the low bits). Volatile,
// so that each use computes it: hoisted out of the key loop, the 16 q and k descriptors of D = 128
// would hold 32 registers for the whole loop.
__device__ __forceinline__ uint64_t desc_at(uint64_t desc, uint32_t bytes) {
  uint64_t r;
  asm volatile("add.s64 %0, %1, %2;\n" : "=l"(r) : "l"(desc), "l"(uint64_t(bytes >> 4)));
  return r;
}

// A tile of ROWS rows of D elements, swizzled: 64-column blocks of ROWS x 128 bytes one after the
// other; in a block, row r at r * 128 bytes with its 16-byte chunk c at chunk c ^ (r % 8) (8-row
// atoms of 1024 bytes, 1024-aligned). It is both the K-major layout of q and k (d the reduction
// dim: 8-row atoms 1024 apart, the descriptor's stride) and the N-major layout of v (keys the
// reduction dim: 8 keys per atom, 1024 apart; the next 64 columns ROWS * 128 bytes on, the
// descriptor's leading offset).
template <typename T, int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_swizzled(unsigned char* tile, const T* src, long stride, int r0, int limit, bool async) {
  constexpr int CHUNKS_PER_ROW = D / 8, CHUNKS = ROWS * CHUNKS_PER_ROW;
  static_assert(CHUNKS % THREADS == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int j = 0; j < CHUNKS / THREADS; ++j) {
    const int i = threadIdx.x + j * THREADS;
    const int r = i / CHUNKS_PER_ROW, c = i % CHUNKS_PER_ROW;
    const bool in = r0 + r < limit;
    T* dst = reinterpret_cast<T*>(tile + (c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
    const T* s = src + static_cast<long>(r0 + r) * stride + c * 8;
    if (async) {
      cp_async16(dst, in ? s : src, in);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = in ? s[e] : Elem<T>::from_float(0.0f);
    }
  }
}

// The mask's rows r0 .. r0 + ROWS - 1, keys k0 .. k0 + 63, into a tile of MASK_PITCH-element
// rows by cp.async (16-byte chunks: the slice 16-byte aligned, Sk % 8 == 0); rows from `rows`
// on and keys from Sk on are zeros (those keys get -inf from scale_and_mask, those rows are not
// stored).
template <typename T, int ROWS, int THREADS>
__device__ __forceinline__ void load_mask_tile(unsigned char* tile, MaskView<T> mask, int r0, int rows, int k0, int Sk) {
  constexpr int CHUNKS_PER_ROW = BK / 8, CHUNKS = ROWS * CHUNKS_PER_ROW;
  static_assert(CHUNKS % THREADS == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int j = 0; j < CHUNKS / THREADS; ++j) {
    const int i = threadIdx.x + j * THREADS, r = i / CHUNKS_PER_ROW, c = i % CHUNKS_PER_ROW;
    const bool in = r0 + r < rows && k0 + c * 8 < Sk;
    const T* src = mask.slice + static_cast<long>(r0 + r) * Sk + k0 + c * 8;
    cp_async16(reinterpret_cast<T*>(tile) + r * MASK_PITCH + c * 8, in ? src : mask.slice, in);
  }
}

// cp.async and plain stores write through the generic proxy, wgmma reads through the async one.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

template <typename T, int D, Masking MASKING, Layout LAYOUT, int WG>
__device__ __forceinline__ void flash_attention_fwd_sm90(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                                         const T* __restrict__ mask, T* __restrict__ out, int Hq, int Hkv, int Sq, int Sk,
                                                         int MB, int MH, int MQ, float scale) {
  constexpr int BQ = 64 * WG, THREADS = 128 * WG;
  // A stage: k, v and, with a mask, the block's mask tile (used where the mask has a row per query).
  constexpr uint32_t Q_BYTES = BQ * D * 2, TILE_BYTES = BK * D * 2, MASK_BYTES = MASKING == ADDITIVE ? BQ * MASK_PITCH * 2 : 0;
  constexpr uint32_t STAGE_BYTES = 2 * TILE_BYTES + MASK_BYTES;
  static_assert(MASK_BYTES % 1024 == 0, "stages stay 1024-aligned");
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  // The dynamic shared memory base is only 16-byte aligned; swizzle atoms need 1024.
  const uint32_t base = (smem(shared_bytes) + 1023) & ~1023u;
  unsigned char* base_ptr = shared_bytes + (base - smem(shared_bytes));

  const BlockWork<T> w = block_work<T, MASKING, LAYOUT, BQ, D>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ);
  if (!w.valid) return fill_nan<T, LAYOUT, BQ, D>(w, Sq);
  const int warpgroup = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3;
  const bool async = aligned16(q) && aligned16(k) && aligned16(v);
  // A mask with a row per query (transformers' padding mask, expanded) is staged tile by tile:
  // read where it lies, each thread's pairs of keys from rows of their own, it is uncoalesced.
  const bool staged = MASKING == ADDITIVE && w.mask.MQ > 1 && async && aligned16(w.mask.slice) && Sk % 8 == 0;

  load_swizzled<T, BQ, D, THREADS>(base_ptr, w.qh, w.q_stride, w.q0, Sq, async);
  load_swizzled<T, BK, D, THREADS>(base_ptr + Q_BYTES, w.kh, w.kv_stride, 0, Sk, async);
  load_swizzled<T, BK, D, THREADS>(base_ptr + Q_BYTES + TILE_BYTES, w.vh, w.kv_stride, 0, Sk, async);
  if (staged) load_mask_tile<T, BQ, THREADS>(base_ptr + Q_BYTES + 2 * TILE_BYTES, w.mask, w.q0, min(Sq, w.mask.MQ), 0, Sk);
  cp_async_commit();

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8 of this warp's 16

  const int group_row0 = w.q0 + warpgroup * 64, row_base = group_row0 + warp * 16;
  const float score_scale = MASKING == ADDITIVE ? scale : scale * LOG2E;
  const uint32_t q_base = base + warpgroup * 64 * 128;  // this warpgroup's rows in each 64-column block

  for (int t = 0; t < w.k_tiles; ++t) {
    cp_async_wait_all();
    fence_proxy_async();
    __syncthreads();  // tile t is in place for all; every warpgroup is done with the stage tile t + 1 takes
    if (t + 1 < w.k_tiles) {
      unsigned char* next = base_ptr + Q_BYTES + ((t + 1) & 1) * STAGE_BYTES;
      load_swizzled<T, BK, D, THREADS>(next, w.kh, w.kv_stride, (t + 1) * BK, Sk, async);
      load_swizzled<T, BK, D, THREADS>(next + TILE_BYTES, w.vh, w.kv_stride, (t + 1) * BK, Sk, async);
      if (staged) load_mask_tile<T, BQ, THREADS>(next + 2 * TILE_BYTES, w.mask, w.q0, min(Sq, w.mask.MQ), (t + 1) * BK, Sk);
      cp_async_commit();
    }
    const int k0 = t * BK;
    if (MASKING == CAUSAL && k0 > group_row0 + 63) continue;  // every key of the tile is after this warpgroup's rows
    const uint32_t k_base = base + Q_BYTES + (t & 1) * STAGE_BYTES, v_base = k_base + TILE_BYTES;

    float s[BK / 8][4];
#pragma unroll
    for (int i = 0; i < BK / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
    fence_operands(s);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    const uint64_t q_desc = make_desc(q_base, 16, 1024), k_desc = make_desc(k_base, 16, 1024);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {  // 16 of d: 32 bytes along the swizzled rows of its 64-column block
      const uint32_t block = (ks >> 2), step = (ks & 3) * 32;
      wgmma_qk<T>(s, desc_at(q_desc, block * BQ * 128 + step), desc_at(k_desc, block * BK * 128 + step));
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    fence_operands(s);

    const T* mask_tile = reinterpret_cast<const T*>(base_ptr + Q_BYTES + (t & 1) * STAGE_BYTES + 2 * TILE_BYTES) + (row_base - w.q0) * MASK_PITCH;
    scale_and_mask<T, MASKING>(s, row_base, k0, Sk, score_scale, w.mask, staged ? mask_tile : nullptr);
    online_softmax<MASKING, D>(s, m, l, o);

    unsigned pa[BK / 16][4];
#pragma unroll
    for (int kc = 0; kc < BK / 16; ++kc) weights_fragment<T>(pa[kc], s, kc);
    fence_operands(o);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    const uint64_t v_desc = make_desc(v_base, BK * 128, 1024);
#pragma unroll
    for (int kc = 0; kc < BK / 16; ++kc) wgmma_pv<T>(o, pa[kc], desc_at(v_desc, kc * 2 * 1024));  // 16 keys: two atoms
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    fence_operands(o);
  }
  store_rows<T, D>(w.oh, w.out_stride, o, l, row_base, Sq, (reinterpret_cast<uintptr_t>(out) & 3) == 0);
}

// The d128 body with TMA (sm_90a), for blocks whose q, k, v are 16-byte aligned and whose first
// output row can hold two tensor maps (tma_ready); d64 keeps the body above (two blocks per SM:
// measured faster there than this one with its 64 columns, see docs/flash_attention.md). Key tiles of NK = 128 keys; thread 0 loads k and v
// tiles by TMA into a ring of TMA_STAGES stages (full/empty mbarriers per stage: a stage is
// refilled once both warpgroups have released it), through tensor maps it builds and publishes in
// the block's first output row (TMA reads maps from global memory only; the row is written
// with results at the end, after every load has landed). Each warpgroup overlaps its own work:
// while the tensor cores run this tile's scores and the previous tile's p @ v, it waits for the
// scores only, masks and softmaxes them, then waits for p @ v, rescales the outputs and converts
// the new weights (FlashAttention-3's intra-warpgroup pipelining). Without a mask the softmax
// scale is applied in the exponent's FMA, exp2(s * scale * log2(e) - max), not to each score
// first. Registers: scores 64, outputs 64, weights 32 a thread (one block of 256 threads per SM:
// up to 255 registers).
constexpr int TMA_NK = 128, TMA_STAGES = 3;
// q, the stages, two maps' staging (128-byte aligned), full and empty barriers; + 1024 to align.
struct TmaLayout {
  static constexpr uint32_t Q_BYTES = 128 * 128 * 2, TILE_BYTES = TMA_NK * 128 * 2, STAGE_BYTES = 2 * TILE_BYTES;
  static constexpr uint32_t SMEM_BYTES = 1024 + Q_BYTES + TMA_STAGES * STAGE_BYTES + 256 + 16 * TMA_STAGES;
};
static_assert(TmaLayout::SMEM_BYTES == 230704, "the d128 kernels' sm_90a shared_memory in kernels/flash_attention.toml");

// The maps' home: the 256 bytes of the block's first output row (q0 < Sq: every block has it).
template <typename T>
__device__ __forceinline__ uint8_t* tensor_map_home(const BlockWork<T>& w) {
  return reinterpret_cast<uint8_t*>(w.oh + static_cast<long>(w.q0) * w.out_stride);
}

// Whether the TMA body can run this block: 16-byte aligned rows of q, k, v (TMA's global address
// and row stride; rows are 256 bytes or more apart, multiples of 16), a 128-byte aligned home for
// the maps, and, without a mask, a positive scale (folded into the exponent's FMA). Otherwise the
// body above runs (cp.async or element loads, any scale).
template <typename T, Masking MASKING>
__device__ __forceinline__ bool tma_ready(const BlockWork<T>& w, float scale) {
  return w.valid && aligned16(w.qh) && aligned16(w.kh) && aligned16(w.vh) && (reinterpret_cast<uintptr_t>(tensor_map_home(w)) & 127) == 0 &&
         (MASKING == ADDITIVE || scale > 0.0f);
}

template <typename T, Masking MASKING>
__device__ __forceinline__ void flash_attention_fwd_sm90_tma(const BlockWork<T>& w, int Sq, int Sk, float scale) {
  constexpr int D = 128, BQ = 128, NK = TMA_NK, STAGES = TMA_STAGES;
  using L = TmaLayout;
  namespace pipe = sm90_pipeline;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const uint32_t base = (smem(shared_bytes) + 1023) & ~1023u;
  unsigned char* base_ptr = shared_bytes + (base - smem(shared_bytes));
  const uint32_t stages = base + L::Q_BYTES, staging = stages + STAGES * L::STAGE_BYTES;
  const uint32_t full = staging + 256, empty = full + 8 * STAGES;
  uint64_t* staging_words = reinterpret_cast<uint64_t*>(base_ptr + L::Q_BYTES + STAGES * L::STAGE_BYTES);
  const int tid = threadIdx.x, warpgroup = tid >> 7, warp = (tid >> 5) & 3;
  const int k_tiles = (w.k_tiles * BK + NK - 1) / NK;  // block_work counts 64-key tiles
  uint8_t* home = tensor_map_home(w);
  const void *map_k = home, *map_v = home + 128;

  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) pipe::mbar_init(full + 8 * s, 1), pipe::mbar_init(empty + 8 * s, 2);
  }
  load_swizzled<T, BQ, D, 256>(base_ptr, w.qh, w.q_stride, w.q0, Sq, true);
  cp_async_commit();
  __syncthreads();  // the barriers exist

  // Tile t's k and v: two boxes of 64 columns x 128 rows each (rows past Sk arrive as zeros).
  auto load_tile = [&](int t) {
    const uint32_t stage = stages + (t % STAGES) * L::STAGE_BYTES, bar = full + 8 * (t % STAGES);
    pipe::mbar_arrive_expect_tx(bar, L::STAGE_BYTES);
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      pipe::tma_load(stage + c * NK * 128, map_k, c * 64, t * NK, bar);
      pipe::tma_load(stage + L::TILE_BYTES + c * NK * 128, map_v, c * 64, t * NK, bar);
    }
  };
  if (tid < 32) {
    staging_words[tid] = 0;
    __syncwarp();
    if (tid == 0) {
      pipe::encode_tensor_map<T>(staging, w.kh, Sk, D, uint64_t(w.kv_stride) * 2, NK);
      pipe::encode_tensor_map<T>(staging + 128, w.vh, Sk, D, uint64_t(w.kv_stride) * 2, NK);
    }
    __syncwarp();
    for (int i = 0; i < 2; ++i) {
      asm volatile("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.cta.sync.aligned [%0], [%1], 128;\n" ::"l"(home + 128 * i),
                   "r"(staging + 128 * i)
                   : "memory");
    }
    if (tid == 0) {
      asm volatile("fence.proxy.tensormap::generic.acquire.cta [%0], 128;\n" ::"l"(map_k) : "memory");
      asm volatile("fence.proxy.tensormap::generic.acquire.cta [%0], 128;\n" ::"l"(map_v) : "memory");
      for (int t = 0; t < min(STAGES, k_tiles); ++t) load_tile(t);
    }
  }
  cp_async_wait_all();
  fence_proxy_async();
  __syncthreads();  // q is in place for both warpgroups

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];
  float s[NK / 8][4];
  unsigned p[NK / 16][4];
  const int row_base = w.q0 + warpgroup * 64 + warp * 16;
  const float score_scale = MASKING == ADDITIVE ? scale : scale * LOG2E;
  constexpr bool FOLD = MASKING != ADDITIVE;  // the scale applied in the exponent's FMA (scale > 0)
  const uint64_t q_desc = make_desc(base + warpgroup * 64 * 128, 16, 1024);

  // The scores of tile t into s, issued (one commit group).
  auto issue_scores = [&](int t) {
    const uint64_t k_desc = make_desc(stages + (t % STAGES) * L::STAGE_BYTES, 16, 1024);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint32_t block = ks >> 2, step = (ks & 3) * 32;
      wgmma_qk<T>(s, desc_at(q_desc, block * BQ * 128 + step), desc_at(k_desc, block * NK * 128 + step), ks > 0);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  };
  // o += p @ v of tile t, issued (one commit group).
  auto issue_pv = [&](int t) {
    const uint64_t v_desc = make_desc(stages + (t % STAGES) * L::STAGE_BYTES + L::TILE_BYTES, NK * 128, 1024);
#pragma unroll
    for (int kc = 0; kc < NK / 16; ++kc) wgmma_pv<T>(o, p[kc], desc_at(v_desc, kc * 2 * 1024));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  };
  auto to_weights = [&]() {
#pragma unroll
    for (int kc = 0; kc < NK / 16; ++kc) weights_fragment<T, NK>(p[kc], s, kc);
  };

  pipe::mbar_wait(full, 0);
  fence_operands(s);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  issue_scores(0);
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  fence_operands(s);
  scale_and_mask<T, MASKING, NK>(s, row_base, 0, Sk, FOLD ? 1.0f : score_scale, w.mask);
  softmax_weights<MASKING, NK>(s, m, l, alpha, FOLD ? score_scale : 1.0f);
  to_weights();

  for (int t = 1; t < k_tiles; ++t) {
    pipe::mbar_wait(full + 8 * (t % STAGES), (t / STAGES) & 1);
    fence_operands(s);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    issue_scores(t);
    fence_operands(o);
    issue_pv(t - 1);
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // the scores; p @ v runs on
    fence_operands(s);
    scale_and_mask<T, MASKING, NK>(s, row_base, t * NK, Sk, FOLD ? 1.0f : score_scale, w.mask);
    softmax_weights<MASKING, NK>(s, m, l, alpha, FOLD ? score_scale : 1.0f);
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    fence_operands(o);
    const int done = t - 1;  // its stage is no longer read by this warpgroup
    if ((tid & 127) == 0) pipe::mbar_arrive(empty + 8 * (done % STAGES));
    rescale<D>(o, alpha);
    to_weights();
    if (tid == 0 && done + STAGES < k_tiles) {
      pipe::mbar_wait(empty + 8 * (done % STAGES), (done / STAGES) & 1);
      load_tile(done + STAGES);
    }
  }
  fence_operands(o);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  issue_pv(k_tiles - 1);
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  fence_operands(o);
  // Every load has landed (this warpgroup waited for each tile; the other one's stores are rows
  // of its own): the maps' row may take results.
  store_rows<T, D>(w.oh, w.out_stride, o, l, row_base, Sq, (reinterpret_cast<uintptr_t>(w.oh) & 3) == 0);
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// The launch configuration of every variant, the same for both bodies (a spec's block and grid
// are per kernel, not per arch; kernels/flash_attention.toml states them): 32 * WARPS threads
// per block and BQ = 16 * MT * WARPS = 128 query rows (grid y: ceildiv(Sq, 128)); on sm_90a
// WARPS / 4 = 2 warpgroups of 64 rows. Dynamic shared memory: the mma.sync body's 2 stages x
// (k, v) x 64 rows x (D + 8) x 2 bytes (d64 36864, d128 69632); the wgmma body's q tile (BQ x D
// x 2 bytes) + 2 stages x (k, v) x 64 x D x 2 bytes + 1024 for alignment (d64 50176, d128
// 99328). On an H100 the mma.sync body alone measured 4 warps x 32 rows faster for d64 causal
// (165 vs 129 TFLOP/s at GPT-2's shape); the shared block size follows the wgmma body.
struct Launch {
  static constexpr int WARPS = 8, MT = 1, BQ = 16 * MT * WARPS;
};

// One entry point's body: the wgmma one where compiled for sm_90a, the mma.sync one elsewhere.
template <typename T, int D, Masking MASKING, Layout LAYOUT = HEADS>
__device__ __forceinline__ void forward(const T* q, const T* k, const T* v, const T* mask, T* out, int Hq, int Hkv, int Sq, int Sk, int MB,
                                        int MH, int MQ, float scale) {
  using L = Launch;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(L::BQ == 64 * (L::WARPS / 4), "both bodies take the same rows per block");
  if constexpr (D == 128) {
    static_assert(L::BQ == 128 && L::WARPS == 8, "the TMA body: two warpgroups of 64 rows");
    const BlockWork<T> w = block_work<T, MASKING, LAYOUT, L::BQ, D>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ);
    if (tma_ready<T, MASKING>(w, scale)) return flash_attention_fwd_sm90_tma<T, MASKING>(w, Sq, Sk, scale);
  }
  flash_attention_fwd_sm90<T, D, MASKING, LAYOUT, L::WARPS / 4>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale);
#else
  flash_attention_fwd<T, D, MASKING, LAYOUT, L::WARPS, L::MT>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale);
#endif
}

}  // namespace flash_attention

// The entry points: flash_attn_<type>_d<D>[_causal | _mask]. Without a mask: (q, k, v, out, B,
// Hq, Hkv, Sq, Sk, scale); with one: (q, k, v, mask, out, B, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale).
// B is the grid's business (grid x: B * Hq); the kernel reads batch b = blockIdx.x / Hq.
// flash_attn_qkv_<type>_d<D>[_causal | _mask]: the same on the QKV layout, qkv [B, S, 3, H, D] ->
// out [B, S, H, D] (self-attention: Sq = Sk = S, Hq = Hkv = H). Without a mask: (qkv, out, B, S,
// H, scale); with one: (qkv, mask, out, B, S, H, MB, MH, MQ, scale), mask [MB, MH, MQ, S].
// flash_attn_bshd_<type>_d<D>[_causal | _mask]: the same on the BSHD layout, q [B, Sq, Hq, D], k and
// v [B, Sk, Hkv, D] -> out [B, Sq, Hq, D], with the parameters of flash_attn_<type>_d<D>[...].
using bf16 = __nv_bfloat16;
using f16 = __half;
using flash_attention::ADDITIVE;
using flash_attention::BSHD;
using flash_attention::CAUSAL;
using flash_attention::forward;
using flash_attention::NONE;
using flash_attention::QKV;

#define FA_THREADS (32 * flash_attention::Launch::WARPS)
// Blocks per SM the registers are budgeted for. sm_90a d64: 2 (at most 128 registers a thread).
// sm_90a d128: 1, the TMA body's (its shared memory takes the SM; up to 255 registers). The
// mma.sync body: 1 (its registers hold q's fragments; capped it spills).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA_MIN_BLOCKS 2
#else
#define FA_MIN_BLOCKS 1
#endif
#define FA_MIN_BLOCKS_D128 1

extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_bf16_d64(const bf16* q, const bf16* k, const bf16* v, bf16* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<bf16, 64, NONE>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_bf16_d64_causal(const bf16* q, const bf16* k, const bf16* v, bf16* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<bf16, 64, CAUSAL>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_bf16_d64_mask(const bf16* q, const bf16* k, const bf16* v, const bf16* mask, bf16* out, int B, int Hq, int Hkv, int Sq, int Sk, int MB, int MH, int MQ, float scale) {
  forward<bf16, 64, ADDITIVE>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_bf16_d128(const bf16* q, const bf16* k, const bf16* v, bf16* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<bf16, 128, NONE>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_bf16_d128_causal(const bf16* q, const bf16* k, const bf16* v, bf16* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<bf16, 128, CAUSAL>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_bf16_d128_mask(const bf16* q, const bf16* k, const bf16* v, const bf16* mask, bf16* out, int B, int Hq, int Hkv, int Sq, int Sk, int MB, int MH, int MQ, float scale) {
  forward<bf16, 128, ADDITIVE>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_f16_d64(const f16* q, const f16* k, const f16* v, f16* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<f16, 64, NONE>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_f16_d64_causal(const f16* q, const f16* k, const f16* v, f16* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<f16, 64, CAUSAL>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_f16_d64_mask(const f16* q, const f16* k, const f16* v, const f16* mask, f16* out, int B, int Hq, int Hkv, int Sq, int Sk, int MB, int MH, int MQ, float scale) {
  forward<f16, 64, ADDITIVE>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_f16_d128(const f16* q, const f16* k, const f16* v, f16* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<f16, 128, NONE>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_f16_d128_causal(const f16* q, const f16* k, const f16* v, f16* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<f16, 128, CAUSAL>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_f16_d128_mask(const f16* q, const f16* k, const f16* v, const f16* mask, f16* out, int B, int Hq, int Hkv, int Sq, int Sk, int MB, int MH, int MQ, float scale) {
  forward<f16, 128, ADDITIVE>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_qkv_bf16_d64(const bf16* qkv, bf16* out, int B, int S, int H, float scale) {
  forward<bf16, 64, NONE, QKV>(qkv, qkv + static_cast<long>(H) * 64, qkv + 2 * static_cast<long>(H) * 64, nullptr, out, H, H, S, S, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_qkv_bf16_d64_causal(const bf16* qkv, bf16* out, int B, int S, int H, float scale) {
  forward<bf16, 64, CAUSAL, QKV>(qkv, qkv + static_cast<long>(H) * 64, qkv + 2 * static_cast<long>(H) * 64, nullptr, out, H, H, S, S, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_qkv_bf16_d64_mask(const bf16* qkv, const bf16* mask, bf16* out, int B, int S, int H, int MB, int MH, int MQ, float scale) {
  forward<bf16, 64, ADDITIVE, QKV>(qkv, qkv + static_cast<long>(H) * 64, qkv + 2 * static_cast<long>(H) * 64, mask, out, H, H, S, S, MB, MH, MQ, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_qkv_bf16_d128(const bf16* qkv, bf16* out, int B, int S, int H, float scale) {
  forward<bf16, 128, NONE, QKV>(qkv, qkv + static_cast<long>(H) * 128, qkv + 2 * static_cast<long>(H) * 128, nullptr, out, H, H, S, S, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_qkv_bf16_d128_causal(const bf16* qkv, bf16* out, int B, int S, int H, float scale) {
  forward<bf16, 128, CAUSAL, QKV>(qkv, qkv + static_cast<long>(H) * 128, qkv + 2 * static_cast<long>(H) * 128, nullptr, out, H, H, S, S, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_qkv_bf16_d128_mask(const bf16* qkv, const bf16* mask, bf16* out, int B, int S, int H, int MB, int MH, int MQ, float scale) {
  forward<bf16, 128, ADDITIVE, QKV>(qkv, qkv + static_cast<long>(H) * 128, qkv + 2 * static_cast<long>(H) * 128, mask, out, H, H, S, S, MB, MH, MQ, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_qkv_f16_d64(const f16* qkv, f16* out, int B, int S, int H, float scale) {
  forward<f16, 64, NONE, QKV>(qkv, qkv + static_cast<long>(H) * 64, qkv + 2 * static_cast<long>(H) * 64, nullptr, out, H, H, S, S, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_qkv_f16_d64_causal(const f16* qkv, f16* out, int B, int S, int H, float scale) {
  forward<f16, 64, CAUSAL, QKV>(qkv, qkv + static_cast<long>(H) * 64, qkv + 2 * static_cast<long>(H) * 64, nullptr, out, H, H, S, S, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_qkv_f16_d64_mask(const f16* qkv, const f16* mask, f16* out, int B, int S, int H, int MB, int MH, int MQ, float scale) {
  forward<f16, 64, ADDITIVE, QKV>(qkv, qkv + static_cast<long>(H) * 64, qkv + 2 * static_cast<long>(H) * 64, mask, out, H, H, S, S, MB, MH, MQ, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_qkv_f16_d128(const f16* qkv, f16* out, int B, int S, int H, float scale) {
  forward<f16, 128, NONE, QKV>(qkv, qkv + static_cast<long>(H) * 128, qkv + 2 * static_cast<long>(H) * 128, nullptr, out, H, H, S, S, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_qkv_f16_d128_causal(const f16* qkv, f16* out, int B, int S, int H, float scale) {
  forward<f16, 128, CAUSAL, QKV>(qkv, qkv + static_cast<long>(H) * 128, qkv + 2 * static_cast<long>(H) * 128, nullptr, out, H, H, S, S, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_qkv_f16_d128_mask(const f16* qkv, const f16* mask, f16* out, int B, int S, int H, int MB, int MH, int MQ, float scale) {
  forward<f16, 128, ADDITIVE, QKV>(qkv, qkv + static_cast<long>(H) * 128, qkv + 2 * static_cast<long>(H) * 128, mask, out, H, H, S, S, MB, MH, MQ, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_bshd_bf16_d64(const bf16* q, const bf16* k, const bf16* v, bf16* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<bf16, 64, NONE, BSHD>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_bshd_bf16_d64_causal(const bf16* q, const bf16* k, const bf16* v, bf16* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<bf16, 64, CAUSAL, BSHD>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_bshd_bf16_d64_mask(const bf16* q, const bf16* k, const bf16* v, const bf16* mask, bf16* out, int B, int Hq, int Hkv, int Sq, int Sk, int MB, int MH, int MQ, float scale) {
  forward<bf16, 64, ADDITIVE, BSHD>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_bshd_bf16_d128(const bf16* q, const bf16* k, const bf16* v, bf16* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<bf16, 128, NONE, BSHD>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_bshd_bf16_d128_causal(const bf16* q, const bf16* k, const bf16* v, bf16* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<bf16, 128, CAUSAL, BSHD>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_bshd_bf16_d128_mask(const bf16* q, const bf16* k, const bf16* v, const bf16* mask, bf16* out, int B, int Hq, int Hkv, int Sq, int Sk, int MB, int MH, int MQ, float scale) {
  forward<bf16, 128, ADDITIVE, BSHD>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_bshd_f16_d64(const f16* q, const f16* k, const f16* v, f16* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<f16, 64, NONE, BSHD>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_bshd_f16_d64_causal(const f16* q, const f16* k, const f16* v, f16* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<f16, 64, CAUSAL, BSHD>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS) flash_attn_bshd_f16_d64_mask(const f16* q, const f16* k, const f16* v, const f16* mask, f16* out, int B, int Hq, int Hkv, int Sq, int Sk, int MB, int MH, int MQ, float scale) {
  forward<f16, 64, ADDITIVE, BSHD>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_bshd_f16_d128(const f16* q, const f16* k, const f16* v, f16* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<f16, 128, NONE, BSHD>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_bshd_f16_d128_causal(const f16* q, const f16* k, const f16* v, f16* out, int B, int Hq, int Hkv, int Sq, int Sk, float scale) {
  forward<f16, 128, CAUSAL, BSHD>(q, k, v, nullptr, out, Hq, Hkv, Sq, Sk, 1, 1, 1, scale);
}
extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_MIN_BLOCKS_D128) flash_attn_bshd_f16_d128_mask(const f16* q, const f16* k, const f16* v, const f16* mask, f16* out, int B, int Hq, int Hkv, int Sq, int Sk, int MB, int MH, int MQ, float scale) {
  forward<f16, 128, ADDITIVE, BSHD>(q, k, v, mask, out, Hq, Hkv, Sq, Sk, MB, MH, MQ, scale);
}
