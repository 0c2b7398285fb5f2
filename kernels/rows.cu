// Per-row kernels over a [rows, cols] float tensor, one block per row: row sum and max, softmax,
// LayerNorm and RMSNorm. They share one shape: each thread accumulates its strided share of the
// row, the block combines the partial results (warp shuffles, then one shared-memory slot per
// warp), and the kernels that write a row then make a second pass over it.
//
// The second pass reads the row from a cache in dynamic shared memory, filled during the first:
// re-reading it from global memory would mostly miss L2 for long rows (with 8192 columns, the
// rows in flight on an H100 are 30+ MB, most of its L2), and a third trip to DRAM costs a third
// of the bandwidth. Each thread caches and re-reads only its own elements, so the cache needs
// no synchronization. Rows longer than the dynamic shared memory the spec gives
// (%dynamic_smem_size) are read twice from global memory instead.
//
// Loads are 16-byte float4s when every row starts 16-byte aligned: the pointers aligned (IREE
// bindings are only element-aligned) and cols a multiple of 4; otherwise one float at a time,
// still coalesced. Block size: any multiple of 32 up to 1024 (the spec says 256).

#include <cstdint>

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// float4 arithmetic and loads, so that one generic lambda serves the float4 and the float path.
__device__ __forceinline__ float4 operator-(float4 v, float s) { return make_float4(v.x - s, v.y - s, v.z - s, v.w - s); }
__device__ __forceinline__ float4 operator*(float4 v, float s) { return make_float4(v.x * s, v.y * s, v.z * s, v.w * s); }
__device__ __forceinline__ float4 operator*(float4 a, float4 b) { return make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w); }
__device__ __forceinline__ float4 operator+(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
// p[i] as the type of `like`: the i-th float, or the i-th float4.
__device__ __forceinline__ float load(const float* __restrict__ p, int i, float) { return p[i]; }
__device__ __forceinline__ float4 load(const float* __restrict__ p, int i, float4) { return reinterpret_cast<const float4*>(p)[i]; }
template <typename F> __device__ __forceinline__ float each(float v, F&& f) { return f(v); }
template <typename F> __device__ __forceinline__ float4 each(float4 v, F&& f) { return make_float4(f(v.x), f(v.y), f(v.z), f(v.w)); }

// Accumulators: add() takes one element or a float4 of them. Those that cross threads
// (block_reduce) also have merge() and shfl_xor(), and no constructors, so that they can live
// in __shared__ memory.
struct Sum {
  float s;
  static __device__ Sum identity() { return {0.0f}; }
  __device__ void add(float x) { s += x; }
  __device__ void add(float4 v) { s += (v.x + v.y) + (v.z + v.w); }
  __device__ void merge(const Sum& o) { s += o.s; }
  __device__ Sum shfl_xor(int lane_mask) const { return {__shfl_xor_sync(kFullMask, s, lane_mask)}; }
};

struct Max {
  float m;
  static __device__ Max identity() { return {-INFINITY}; }
  __device__ void add(float x) { m = fmaxf(m, x); }
  __device__ void add(float4 v) { m = fmaxf(fmaxf(m, fmaxf(v.x, v.y)), fmaxf(v.z, v.w)); }
  __device__ void merge(const Max& o) { m = fmaxf(m, o.m); }
  __device__ Max shfl_xor(int lane_mask) const { return {__shfl_xor_sync(kFullMask, m, lane_mask)}; }
};

// Sum and sum of squares, for the variance.
struct Moments {
  float s1, s2;
  static __device__ Moments identity() { return {0.0f, 0.0f}; }
  __device__ void add(float d) {
    s1 += d;
    s2 += d * d;
  }
  __device__ void add(float4 d) {
    s1 += (d.x + d.y) + (d.z + d.w);
    s2 += (d.x * d.x + d.y * d.y) + (d.z * d.z + d.w * d.w);
  }
  __device__ void merge(const Moments& o) {
    s1 += o.s1;
    s2 += o.s2;
  }
  __device__ Moments shfl_xor(int lane_mask) const {
    return {__shfl_xor_sync(kFullMask, s1, lane_mask), __shfl_xor_sync(kFullMask, s2, lane_mask)};
  }
};

// One thread's online softmax statistics: the running maximum m and the sum s of exp(x - m),
// rescaled when m grows, so that one pass over the row gives both. A float4 is taken as a
// group: one rescale per four elements, no branch.
struct MaxSum {
  float m, s;
  __device__ void add(float x) {
    const float top = fmaxf(m, x);
    s = s * expf(m - top) + expf(x - top);
    m = top;
  }
  __device__ void add(float4 v) {
    const float top = fmaxf(fmaxf(m, fmaxf(v.x, v.y)), fmaxf(v.z, v.w));
    s = s * expf(m - top) + ((expf(v.x - top) + expf(v.y - top)) + (expf(v.z - top) + expf(v.w - top)));
    m = top;
  }
};

// Every thread of the block gets the block's total. A butterfly within each warp, one slot
// per warp in shared memory, then every thread merges the (at most 32) slots in the same order,
// which saves a second shuffle round and a broadcast and keeps the result identical across
// threads. Each accumulator type has its own slots, so a kernel may reduce once per type.
template <typename A>
__device__ A block_reduce(A a) {
  __shared__ A partial[32];
#pragma unroll
  for (int lane_mask = 16; lane_mask > 0; lane_mask /= 2) a.merge(a.shfl_xor(lane_mask));
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = a;
  __syncthreads();
  a = A::identity();
  for (int w = 0; w < blockDim.x / 32; ++w) a.merge(partial[w]);
  return a;
}

// The block's dynamic shared memory as a row cache, or null if a row of `cols` doesn't fit.
__device__ __forceinline__ float* row_cache(int cols) {
  extern __shared__ float4 cache[];  // float4: 16-byte aligned
  unsigned bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  return static_cast<size_t>(cols) * sizeof(float) <= bytes ? reinterpret_cast<float*>(cache) : nullptr;
}

// f(v) for the elements of the row this thread owns, v a float4 or a float; each is also
// stored into `cache` (if not null) at its index in the row.
template <typename F>
__device__ __forceinline__ void for_each(const float* __restrict__ row, float* cache, int cols, bool vec, F&& f) {
  if (vec) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    float4* cache4 = reinterpret_cast<float4*>(cache);
#pragma unroll 4
    for (int i = threadIdx.x; i < cols / 4; i += blockDim.x) {
      const float4 v = row4[i];
      if (cache) cache4[i] = v;
      f(v);
    }
  } else {
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
      const float v = row[i];
      if (cache) cache[i] = v;
      f(v);
    }
  }
}

// out[i] = f(in[i], i) for the elements of the row this thread owns, float4s (i indexing
// float4s) or floats, read from `cache` (the same thread filled it in for_each) if not null,
// else from `in`.
template <typename F>
__device__ __forceinline__ void map_row(const float* __restrict__ in, const float* cache, float* __restrict__ out, int cols,
                                        bool vec, F&& f) {
  const float* src = cache ? cache : in;
  if (vec) {
    const float4* src4 = reinterpret_cast<const float4*>(src);
    float4* out4 = reinterpret_cast<float4*>(out);
#pragma unroll 4
    for (int i = threadIdx.x; i < cols / 4; i += blockDim.x) out4[i] = f(src4[i], i);
  } else {
    for (int i = threadIdx.x; i < cols; i += blockDim.x) out[i] = f(src[i], i);
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(1024)
row_sum_f32(const float* __restrict__ x, float* __restrict__ out, int cols) {
  Sum a = Sum::identity();
  for_each(x + static_cast<size_t>(blockIdx.x) * cols, nullptr, cols, aligned16(x) && cols % 4 == 0, [&](auto v) { a.add(v); });
  a = block_reduce(a);
  if (threadIdx.x == 0) out[blockIdx.x] = a.s;
}

extern "C" __global__ void __launch_bounds__(1024)
row_max_f32(const float* __restrict__ x, float* __restrict__ out, int cols) {
  Max a = Max::identity();
  for_each(x + static_cast<size_t>(blockIdx.x) * cols, nullptr, cols, aligned16(x) && cols % 4 == 0, [&](auto v) { a.add(v); });
  a = block_reduce(a);
  if (threadIdx.x == 0) out[blockIdx.x] = a.m;
}

// out = exp(x - max) / sum(exp(x - max)) along each row. One pass for each thread's online
// (max, sum); the block then reduces the maxima, each thread rescales its sum to the row's
// maximum, and the block reduces the sums: two cheap reductions instead of one whose every
// merge costs two exponentials on the critical path.
extern "C" __global__ void __launch_bounds__(1024)
softmax_f32(const float* __restrict__ x, float* __restrict__ out, int cols) {
  const size_t offset = static_cast<size_t>(blockIdx.x) * cols;
  const bool vec = aligned16(x) && aligned16(out) && cols % 4 == 0;
  float* cache = row_cache(cols);
  MaxSum a = {-INFINITY, 0.0f};
  for_each(x + offset, cache, cols, vec, [&](auto v) { a.add(v); });
  const float m = block_reduce(Max{a.m}).m;
  const float inv_sum = 1.0f / block_reduce(Sum{a.m == -INFINITY ? 0.0f : a.s * expf(a.m - m)}).s;  // -inf: no elements
  map_row(x + offset, cache, out + offset, cols, vec, [&](auto v, int) { return each(v, [&](float e) { return expf(e - m) * inv_sum; }); });
}

// out = (x - mean) / sqrt(var + eps) * weight + bias along each row (biased variance, as
// PyTorch's layer_norm). The sums are taken of x - x[0] rather than x: the variance as
// E[d^2] - E[d]^2 then loses no precision to a mean that is large against the spread.
extern "C" __global__ void __launch_bounds__(1024)
layernorm_f32(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
              float* __restrict__ out, int cols, float eps) {
  const size_t offset = static_cast<size_t>(blockIdx.x) * cols;
  const bool vec = aligned16(x) && aligned16(weight) && aligned16(bias) && aligned16(out) && cols % 4 == 0;
  float* cache = row_cache(cols);
  const float shift = x[offset];
  Moments a = Moments::identity();
  for_each(x + offset, cache, cols, vec, [&](auto v) { a.add(v - shift); });
  a = block_reduce(a);
  const float mean_d = a.s1 / cols;
  const float var = fmaxf(a.s2 / cols - mean_d * mean_d, 0.0f);
  const float mean = shift + mean_d;
  const float rstd = rsqrtf(var + eps);
  map_row(x + offset, cache, out + offset, cols, vec, [&](auto v, int i) { return (v - mean) * rstd * load(weight, i, v) + load(bias, i, v); });
}

// out = x / sqrt(mean(x^2) + eps) * weight along each row.
extern "C" __global__ void __launch_bounds__(1024)
rmsnorm_f32(const float* __restrict__ x, const float* __restrict__ weight, float* __restrict__ out, int cols, float eps) {
  const size_t offset = static_cast<size_t>(blockIdx.x) * cols;
  const bool vec = aligned16(x) && aligned16(weight) && aligned16(out) && cols % 4 == 0;
  float* cache = row_cache(cols);
  Sum a = Sum::identity();
  for_each(x + offset, cache, cols, vec, [&](auto v) { a.add(v * v); });
  a = block_reduce(a);
  const float rstd = rsqrtf(a.s / cols + eps);
  map_row(x + offset, cache, out + offset, cols, vec, [&](auto v, int i) { return v * rstd * load(weight, i, v); });
}

// ---------------------------------------------------------------------------------------------
// Short rows: one warp per row. With a block per row, a 1024-column row gives each of 256
// threads a single float4, and the block spends its time in barriers and reductions rather than
// in loads (softmax_f32 measured 77% of copy at 65536 x 1024). Here each warp owns a row: a lane
// keeps its elements in registers (kWarpCache float4s or floats: up to 1024 columns with float4s,
// 256 with single floats), reduces with shuffles only (no barrier, no shared memory) and writes
// from the registers. Longer rows stay correct: the elements past the cache are read twice from
// global memory (a warp's row is recent enough to be in L2), but block-per-row kernels suit
// them better. Block: a multiple of 32 up to 256 (the spec says 256: 8 rows per block); the
// bound leaves a lane the registers for its cache (at 1024 threads, 64 registers, LayerNorm spilled).
// ---------------------------------------------------------------------------------------------

namespace {

template <typename V> struct WarpCache;  // elements per lane kept in registers: 32 floats' worth
template <> struct WarpCache<float4> { static constexpr int kSize = 8; };
template <> struct WarpCache<float> { static constexpr int kSize = 32; };

// The row this thread's warp owns, or -1 past the last row.
__device__ __forceinline__ int warp_row(int rows) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  return row < rows ? row : -1;
}

template <typename A>
__device__ __forceinline__ A warp_reduce(A a) {
#pragma unroll
  for (int lane_mask = 16; lane_mask > 0; lane_mask /= 2) a.merge(a.shfl_xor(lane_mask));
  return a;
}

// The warp's pass over a row of n elements of type V (floats or float4s): loads the lane's share
// into `cached` (every load issued before the first use), feeds each element to f, and streams
// the elements past the cache through f as well.
template <typename V, typename F>
__device__ __forceinline__ void warp_read_row(const V* __restrict__ row, int n, V (&cached)[WarpCache<V>::kSize], F&& f) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < WarpCache<V>::kSize; ++j)
    if (lane + 32 * j < n) cached[j] = row[lane + 32 * j];
#pragma unroll
  for (int j = 0; j < WarpCache<V>::kSize; ++j)
    if (lane + 32 * j < n) f(cached[j]);
  for (int i = lane + 32 * WarpCache<V>::kSize; i < n; i += 32) f(row[i]);
}

// out[i] = f(element i, i) for the lane's share of the row: from `cached`, then from `row`.
template <typename V, typename F>
__device__ __forceinline__ void warp_write_row(const V* __restrict__ row, V* __restrict__ out, int n, const V (&cached)[WarpCache<V>::kSize], F&& f) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < WarpCache<V>::kSize; ++j)
    if (lane + 32 * j < n) out[lane + 32 * j] = f(cached[j], lane + 32 * j);
  for (int i = lane + 32 * WarpCache<V>::kSize; i < n; i += 32) out[i] = f(row[i], i);
}

template <typename V>
__device__ __forceinline__ void softmax_warp(const float* __restrict__ x, float* __restrict__ out, int n) {
  const V* row = reinterpret_cast<const V*>(x);
  V cached[WarpCache<V>::kSize];
  MaxSum a = {-INFINITY, 0.0f};
  warp_read_row(row, n, cached, [&](V v) { a.add(v); });
  const float m = warp_reduce(Max{a.m}).m;
  const float inv_sum = 1.0f / warp_reduce(Sum{a.m == -INFINITY ? 0.0f : a.s * expf(a.m - m)}).s;  // -inf: no elements
  warp_write_row(row, reinterpret_cast<V*>(out), n, cached, [&](V v, int) { return each(v, [&](float e) { return expf(e - m) * inv_sum; }); });
}

template <typename V>
__device__ __forceinline__ void layernorm_warp(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
                                               float* __restrict__ out, int cols, int n, float eps) {
  const V* row = reinterpret_cast<const V*>(x);
  V cached[WarpCache<V>::kSize];
  const float shift = x[0];  // as layernorm_f32: sums of x - x[0] keep the variance exact for large means
  Moments a = Moments::identity();
  warp_read_row(row, n, cached, [&](V v) { a.add(v - shift); });
  a = warp_reduce(a);
  const float mean_d = a.s1 / cols;
  const float var = fmaxf(a.s2 / cols - mean_d * mean_d, 0.0f);
  const float mean = shift + mean_d;
  const float rstd = rsqrtf(var + eps);
  warp_write_row(row, reinterpret_cast<V*>(out), n, cached, [&](V v, int i) { return (v - mean) * rstd * load(weight, i, v) + load(bias, i, v); });
}

}  // namespace

// softmax_f32 for short rows (up to 1024 columns from registers): one warp per row.
extern "C" __global__ void __launch_bounds__(256)
softmax_warp_f32(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
  const int row = warp_row(rows);
  if (row < 0) return;
  const size_t offset = static_cast<size_t>(row) * cols;
  if (aligned16(x) && aligned16(out) && cols % 4 == 0)
    softmax_warp<float4>(x + offset, out + offset, cols / 4);
  else
    softmax_warp<float>(x + offset, out + offset, cols);
}

// layernorm_f32 for short rows (up to 1024 columns from registers): one warp per row.
extern "C" __global__ void __launch_bounds__(256)
layernorm_warp_f32(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
                   float* __restrict__ out, int rows, int cols, float eps) {
  const int row = warp_row(rows);
  if (row < 0) return;
  const size_t offset = static_cast<size_t>(row) * cols;
  if (aligned16(x) && aligned16(weight) && aligned16(bias) && aligned16(out) && cols % 4 == 0)
    layernorm_warp<float4>(x + offset, weight, bias, out + offset, cols, cols / 4, eps);
  else
    layernorm_warp<float>(x + offset, weight, bias, out + offset, cols, cols, eps);
}
