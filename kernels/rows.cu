// Per-row kernels over a [rows, cols] tensor: row sum and max, softmax, LayerNorm and RMSNorm,
// in float32 and (softmax, LayerNorm, RMSNorm) bfloat16 and float16 with float32 arithmetic.
//
// A group of threads owns a row: the whole block (block-per-row kernels, `_f32`/`_bf16`/`_f16`: long
// rows) or one warp (`_warp_` kernels: short rows). Each thread accumulates its strided share of
// the row, the group combines the partial results (warp shuffles; for a block, then one
// shared-memory slot per warp), and the kernels that write a row then make a second pass over it.
//
// The second pass does not read global memory again: re-reading a long row would mostly miss L2
// (with 8192 columns the rows in flight on an H100 are 30+ MB, most of its L2), and a third trip
// to DRAM costs a third of the bandwidth. Each thread keeps its first elements of the row in
// registers (kRegs below; every load issued before the first use) and the elements past those
// in the block's dynamic shared memory if the spec gives enough (%dynamic_smem_size); only what
// fits neither is read twice from global memory. Each thread caches and re-reads only its own
// elements, so the caches need no synchronization. The second pass computes a thread's
// register-held results before storing any, so that its loads of weight and bias (L2 hits) are
// in flight together rather than one per store.
//
// How many registers: registers are allocated per kernel, not per launch, and a block-per-row
// kernel must serve short rows too. Measured on an H100 (layernorm_f32, block 256, % of copy at
// 8192 / 4096 / 2048 / 1024 columns): 32 registers of row (8 float4s, 74-80 registers in all,
// 3 blocks per SM) 98-99 / 98-99 / 78-80 / 50-52; the same capped at 64 registers (spills) 88-91
// at 8192; one float4 in registers and the rest in shared memory (38 registers) 94.5 / 94.2 /
// 91.6 / 90.7; the previous kernel (shared memory only, the write pass one load per store)
// 89 / 94.6 / 92.3 / 88. Long rows need bytes in flight, which registers give; short rows need
// resident blocks, which registers take. The block-per-row kernels keep one vector in registers;
// the warp-per-row kernels (short rows by design) keep 32 registers' worth.
//
// Loads are 16-byte vectors (4 floats, 8 bfloat16s or halves) when every row starts 16-byte
// aligned: the pointers aligned (IREE bindings are only element-aligned) and cols a multiple of
// the vector; otherwise one element at a time, still coalesced. Block size: a multiple of 32, up
// to 1024 for the block-per-row kernels (softmax_f32: 256) and 256 for the warp kernels; the
// spec says 256 for f32 and 128 for bf16 and f16.
//
// The f16 kernels are the bf16 ones with another storage type: both are 2 bytes, so the same
// vectors, register caches, blocks and shared memory hold the same number of columns, and the
// bf16 measurements that chose those apply as they stand.

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// ---------------------------------------------------------------------------------------------
// Values. A kernel body is written once for a generic `v`: a float (one element), a float4 (a
// 16-byte vector of floats) or a Float8 (a 16-byte vector of 8 bfloat16s or halves, widened to
// float).
// ---------------------------------------------------------------------------------------------

struct Float8 {
  float4 lo, hi;
};

__device__ __forceinline__ float4 operator-(float4 v, float s) { return make_float4(v.x - s, v.y - s, v.z - s, v.w - s); }
__device__ __forceinline__ float4 operator*(float4 v, float s) { return make_float4(v.x * s, v.y * s, v.z * s, v.w * s); }
__device__ __forceinline__ float4 operator*(float4 a, float4 b) { return make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w); }
__device__ __forceinline__ float4 operator+(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
__device__ __forceinline__ Float8 operator-(Float8 v, float s) { return {v.lo - s, v.hi - s}; }
__device__ __forceinline__ Float8 operator*(Float8 v, float s) { return {v.lo * s, v.hi * s}; }
__device__ __forceinline__ Float8 operator*(Float8 a, Float8 b) { return {a.lo * b.lo, a.hi * b.hi}; }
__device__ __forceinline__ Float8 operator+(Float8 a, Float8 b) { return {a.lo + b.lo, a.hi + b.hi}; }

// f applied to each element; the sum and the maximum of the elements.
template <typename F> __device__ __forceinline__ float each(float v, F&& f) { return f(v); }
template <typename F> __device__ __forceinline__ float4 each(float4 v, F&& f) { return make_float4(f(v.x), f(v.y), f(v.z), f(v.w)); }
template <typename F> __device__ __forceinline__ Float8 each(Float8 v, F&& f) { return {each(v.lo, f), each(v.hi, f)}; }
__device__ __forceinline__ float hsum(float v) { return v; }
__device__ __forceinline__ float hsum(float4 v) { return (v.x + v.y) + (v.z + v.w); }
__device__ __forceinline__ float hsum(Float8 v) { return hsum(v.lo) + hsum(v.hi); }
__device__ __forceinline__ float hmax(float v) { return v; }
__device__ __forceinline__ float hmax(float4 v) { return fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)); }
__device__ __forceinline__ float hmax(Float8 v) { return fmaxf(hmax(v.lo), hmax(v.hi)); }

// Storage ("raw") types, what one load or store moves: float, float4, __nv_bfloat16, uint4 for
// 8 bfloat16s, __half, and Half8 for 8 halves. widen() gives the value to compute with,
// narrow(v, Raw{}) the value to store (bfloat16 and half: rounded to nearest even). Half8 is
// not a plain uint4, which already means 8 bfloat16s: the overloads of widen and narrow tell the
// two apart by type; its one uint4 member keeps it a single 16-byte aligned access.
struct Half8 {
  uint4 bits;
};
template <typename T> struct Vector;  // the 16-byte vector of T
template <> struct Vector<float> { using type = float4; };
template <> struct Vector<__nv_bfloat16> { using type = uint4; };
template <> struct Vector<__half> { using type = Half8; };
template <typename T> constexpr int kPerVector = 16 / sizeof(T);

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float4 widen(float4 v) { return v; }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
// Two bfloat16s (the first in the low half) are the high halves of two floats.
__device__ __forceinline__ float4 widen_bf16x4(unsigned a, unsigned b) {
  return make_float4(__uint_as_float(a << 16), __uint_as_float(a & 0xffff0000u), __uint_as_float(b << 16), __uint_as_float(b & 0xffff0000u));
}
__device__ __forceinline__ Float8 widen(uint4 v) { return {widen_bf16x4(v.x, v.y), widen_bf16x4(v.z, v.w)}; }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
// Halves are not the top bits of floats (5 exponent bits, not 8): each pair converts (cvt), the
// first in the low half.
__device__ __forceinline__ float4 widen_f16x4(unsigned a, unsigned b) {
  const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&a));
  const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&b));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ Float8 widen(Half8 v) { return {widen_f16x4(v.bits.x, v.bits.y), widen_f16x4(v.bits.z, v.bits.w)}; }

__device__ __forceinline__ unsigned bf16x2_bits(float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);  // a in the low half
  return *reinterpret_cast<const unsigned*>(&h);
}
__device__ __forceinline__ float narrow(float v, float) { return v; }
__device__ __forceinline__ float4 narrow(float4 v, float4) { return v; }
__device__ __forceinline__ __nv_bfloat16 narrow(float v, __nv_bfloat16) { return __float2bfloat16_rn(v); }
__device__ __forceinline__ uint4 narrow(Float8 v, uint4) {
  return make_uint4(bf16x2_bits(v.lo.x, v.lo.y), bf16x2_bits(v.lo.z, v.lo.w), bf16x2_bits(v.hi.x, v.hi.y), bf16x2_bits(v.hi.z, v.hi.w));
}
__device__ __forceinline__ unsigned f16x2_bits(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);  // a in the low half
  return *reinterpret_cast<const unsigned*>(&h);
}
__device__ __forceinline__ __half narrow(float v, __half) { return __float2half_rn(v); }
__device__ __forceinline__ Half8 narrow(Float8 v, Half8) {
  return {make_uint4(f16x2_bits(v.lo.x, v.lo.y), f16x2_bits(v.lo.z, v.lo.w), f16x2_bits(v.hi.x, v.hi.y), f16x2_bits(v.hi.z, v.hi.w))};
}

// kFast: __expf (ex2.approx, ~2^-21 relative error near 0) for bfloat16 and half results, whose
// rounding (up to 2^-8 and 2^-11 relative) dwarfs the difference; 8 elements per 16-byte vector would otherwise
// make softmax heavy on arithmetic.
template <bool kFast> __device__ __forceinline__ float exp_(float x) { return kFast ? __expf(x) : expf(x); }

// ---------------------------------------------------------------------------------------------
// Accumulators: add() takes any value (float, float4, Float8). Those that cross threads also
// have merge() and shfl_xor(), and no constructors, so that they can live in __shared__ memory.
// ---------------------------------------------------------------------------------------------

struct Sum {
  float s;
  static __device__ Sum identity() { return {0.0f}; }
  template <typename V> __device__ void add(V v) { s += hsum(v); }
  __device__ void merge(const Sum& o) { s += o.s; }
  __device__ Sum shfl_xor(int lane_mask) const { return {__shfl_xor_sync(kFullMask, s, lane_mask)}; }
};

struct Max {
  float m;
  static __device__ Max identity() { return {-INFINITY}; }
  template <typename V> __device__ void add(V v) { m = fmaxf(m, hmax(v)); }
  __device__ void merge(const Max& o) { m = fmaxf(m, o.m); }
  __device__ Max shfl_xor(int lane_mask) const { return {__shfl_xor_sync(kFullMask, m, lane_mask)}; }
};

// Sum and sum of squares, for the variance.
struct Moments {
  float s1, s2;
  static __device__ Moments identity() { return {0.0f, 0.0f}; }
  template <typename V> __device__ void add(V d) {
    s1 += hsum(d);
    s2 += hsum(d * d);
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
// rescaled when m grows, so that one pass over the row gives both. A vector is taken as a
// group: one rescale per vector, no branch.
template <bool kFast>
struct MaxSum {
  float m, s;
  template <typename V> __device__ void add(V v) {
    const float top = fmaxf(m, hmax(v));
    s = s * exp_<kFast>(m - top) + hsum(each(v, [&](float e) { return exp_<kFast>(e - top); }));
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

template <typename A>
__device__ __forceinline__ A warp_reduce(A a) {
#pragma unroll
  for (int lane_mask = 16; lane_mask > 0; lane_mask /= 2) a.merge(a.shfl_xor(lane_mask));
  return a;
}

// ---------------------------------------------------------------------------------------------
// Groups: who owns a row. rank() and size() within the group, reduce() over it, row() the row
// it owns (-1: none), spill<Raw>(n) a cache for n raws of the row past the registers (null if
// there is none or they don't fit).
// ---------------------------------------------------------------------------------------------

struct Block {
  static __device__ int rank() { return threadIdx.x; }
  static __device__ int size() { return blockDim.x; }
  template <typename A> static __device__ A reduce(A a) { return block_reduce(a); }
  static __device__ int row(int) { return blockIdx.x; }  // grid = rows
  template <typename Raw> static __device__ Raw* spill(int n) {
    extern __shared__ uint4 dynamic_smem[];  // 16-byte aligned
    unsigned bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
    return static_cast<long long>(n) * sizeof(Raw) <= bytes ? reinterpret_cast<Raw*>(dynamic_smem) : nullptr;
  }
};

struct Warp {
  static __device__ int rank() { return threadIdx.x % 32; }
  static __device__ int size() { return 32; }
  template <typename A> static __device__ A reduce(A a) { return warp_reduce(a); }
  static __device__ int row(int rows) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    return row < rows ? row : -1;
  }
  template <typename Raw> static __device__ Raw* spill(int) { return nullptr; }  // the block's warps would share it
};

// The group's pass over a row of n raws: loads the thread's first K (every load issued before
// the first use) into `regs` and feeds them to f as values, then streams the rest through f,
// storing each into `spill` (if not null) for the second pass.
template <typename G, int K, typename Raw, typename F>
__device__ __forceinline__ void read_row(const Raw* __restrict__ row, int n, Raw (&regs)[K], Raw* spill, F&& f) {
  const int r = G::rank(), s = G::size();
#pragma unroll
  for (int j = 0; j < K; ++j)
    if (r + j * s < n) regs[j] = row[r + j * s];
#pragma unroll
  for (int j = 0; j < K; ++j)
    if (r + j * s < n) f(widen(regs[j]));
  const int base = K * s;
#pragma unroll 4
  for (int i = r + base; i < n; i += s) {
    const Raw v = row[i];
    if (spill) spill[i - base] = v;
    f(widen(v));
  }
}

// out[i] = f(value i, i) for the thread's share of the row: all of the register-held results
// first (into `regs`), then their stores; then the rest, from `spill` if not null, else from `row`.
template <typename G, int K, typename Raw, typename F>
__device__ __forceinline__ void write_row(const Raw* __restrict__ row, Raw* __restrict__ out, int n, Raw (&regs)[K], const Raw* spill, F&& f) {
  const int r = G::rank(), s = G::size();
#pragma unroll
  for (int j = 0; j < K; ++j)
    if (r + j * s < n) regs[j] = narrow(f(widen(regs[j]), r + j * s), Raw{});
#pragma unroll
  for (int j = 0; j < K; ++j)
    if (r + j * s < n) out[r + j * s] = regs[j];
  const int base = K * s;
#pragma unroll 4
  for (int i = r + base; i < n; i += s) out[i] = narrow(f(widen(spill ? spill[i - base] : row[i]), i), Raw{});
}

// Streams the thread's share of a row of n raws through f (the row reductions: no second pass).
template <typename Raw, typename F>
__device__ __forceinline__ void for_each(const Raw* __restrict__ row, int n, F&& f) {
#pragma unroll 4
  for (int i = threadIdx.x; i < n; i += blockDim.x) f(widen(row[i]));
}

// ---------------------------------------------------------------------------------------------
// Kernel bodies, for a row of n raws (cols elements). K: raws kept in registers per thread.
// ---------------------------------------------------------------------------------------------

// out = exp(x - max) / sum(exp(x - max)). One pass for each thread's online (max, sum); the
// group then reduces the maxima, each thread rescales its sum to the row's maximum, and the
// group reduces the sums: two cheap reductions instead of one whose every merge costs two
// exponentials on the critical path.
template <typename G, int K, bool kFast, typename Raw>
__device__ __forceinline__ void softmax_row(const Raw* __restrict__ x, Raw* __restrict__ out, int n) {
  Raw regs[K];
  Raw* spill = G::template spill<Raw>(n - K * G::size());
  MaxSum<kFast> a = {-INFINITY, 0.0f};
  read_row<G>(x, n, regs, spill, [&](auto v) { a.add(v); });
  const float m = G::reduce(Max{a.m}).m;
  const float inv_sum = 1.0f / G::reduce(Sum{a.m == -INFINITY ? 0.0f : a.s * exp_<kFast>(a.m - m)}).s;  // -inf: no elements
  write_row<G>(x, out, n, regs, spill, [&](auto v, int) { return each(v, [&](float e) { return exp_<kFast>(e - m) * inv_sum; }); });
}

// out = (x - mean) / sqrt(var + eps) * weight + bias (biased variance, as PyTorch's
// layer_norm). The sums are taken of x - shift, shift = x[0] of the row, rather than of x: the
// variance as E[d^2] - E[d]^2 then loses no precision to a mean that is large against the spread.
template <typename G, int K, typename Raw>
__device__ __forceinline__ void layernorm_row(const Raw* __restrict__ x, const Raw* __restrict__ weight, const Raw* __restrict__ bias,
                                              Raw* __restrict__ out, int n, int cols, float shift, float eps) {
  Raw regs[K];
  Raw* spill = G::template spill<Raw>(n - K * G::size());
  Moments a = Moments::identity();
  read_row<G>(x, n, regs, spill, [&](auto v) { a.add(v - shift); });
  a = G::reduce(a);
  const float mean_d = a.s1 / cols;
  const float var = fmaxf(a.s2 / cols - mean_d * mean_d, 0.0f);
  const float mean = shift + mean_d;
  const float rstd = rsqrtf(var + eps);
  write_row<G>(x, out, n, regs, spill, [&](auto v, int i) { return (v - mean) * rstd * widen(weight[i]) + widen(bias[i]); });
}

// out = x / sqrt(mean(x^2) + eps) * weight.
template <typename G, int K, typename Raw>
__device__ __forceinline__ void rmsnorm_row(const Raw* __restrict__ x, const Raw* __restrict__ weight, Raw* __restrict__ out, int n, int cols,
                                            float eps) {
  Raw regs[K];
  Raw* spill = G::template spill<Raw>(n - K * G::size());
  Sum a = Sum::identity();
  read_row<G>(x, n, regs, spill, [&](auto v) { a.add(v * v); });
  a = G::reduce(a);
  const float rstd = rsqrtf(a.s / cols + eps);
  write_row<G>(x, out, n, regs, spill, [&](auto v, int i) { return v * rstd * widen(weight[i]); });
}

// The kernels: group G's row of [rows, cols] T, as 16-byte vectors where aligned, else as
// elements. kRegs: 32-bit registers per thread for the row's first elements (a vector takes 4).
template <typename T> using Vec = typename Vector<T>::type;

template <typename G, int kVecRegs, int kRegs, typename T>
__device__ __forceinline__ void softmax_rows(const T* __restrict__ x, T* __restrict__ out, int rows, int cols) {
  const int row = G::row(rows);
  if (row < 0) return;
  const size_t offset = static_cast<size_t>(row) * cols;
  constexpr bool kFast = sizeof(T) < 4;
  if (aligned16(x) && aligned16(out) && cols % kPerVector<T> == 0)
    softmax_row<G, kVecRegs / 4, kFast>(reinterpret_cast<const Vec<T>*>(x + offset), reinterpret_cast<Vec<T>*>(out + offset), cols / kPerVector<T>);
  else
    softmax_row<G, kRegs, kFast>(x + offset, out + offset, cols);
}

template <typename G, int kVecRegs, int kRegs, typename T>
__device__ __forceinline__ void layernorm_rows(const T* __restrict__ x, const T* __restrict__ weight, const T* __restrict__ bias,
                                               T* __restrict__ out, int rows, int cols, float eps) {
  const int row = G::row(rows);
  if (row < 0) return;
  const size_t offset = static_cast<size_t>(row) * cols;
  const float shift = widen(x[offset]);
  if (aligned16(x) && aligned16(weight) && aligned16(bias) && aligned16(out) && cols % kPerVector<T> == 0)
    layernorm_row<G, kVecRegs / 4>(reinterpret_cast<const Vec<T>*>(x + offset), reinterpret_cast<const Vec<T>*>(weight),
                                reinterpret_cast<const Vec<T>*>(bias), reinterpret_cast<Vec<T>*>(out + offset), cols / kPerVector<T>, cols,
                                shift, eps);
  else
    layernorm_row<G, kRegs>(x + offset, weight, bias, out + offset, cols, cols, shift, eps);
}

template <typename G, int kVecRegs, int kRegs, typename T>
__device__ __forceinline__ void rmsnorm_rows(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ out, int rows, int cols,
                                             float eps) {
  const int row = G::row(rows);
  if (row < 0) return;
  const size_t offset = static_cast<size_t>(row) * cols;
  if (aligned16(x) && aligned16(weight) && aligned16(out) && cols % kPerVector<T> == 0)
    rmsnorm_row<G, kVecRegs / 4>(reinterpret_cast<const Vec<T>*>(x + offset), reinterpret_cast<const Vec<T>*>(weight),
                              reinterpret_cast<Vec<T>*>(out + offset), cols / kPerVector<T>, cols, eps);
  else
    rmsnorm_row<G, kRegs>(x + offset, weight, out + offset, cols, cols, eps);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Row reductions: one block per row, streamed (nothing to cache).
// ---------------------------------------------------------------------------------------------

extern "C" __global__ void __launch_bounds__(1024)
row_sum_f32(const float* __restrict__ x, float* __restrict__ out, int cols) {
  const float* row = x + static_cast<size_t>(blockIdx.x) * cols;
  Sum a = Sum::identity();
  if (aligned16(x) && cols % 4 == 0)
    for_each(reinterpret_cast<const float4*>(row), cols / 4, [&](auto v) { a.add(v); });
  else
    for_each(row, cols, [&](auto v) { a.add(v); });
  a = block_reduce(a);
  if (threadIdx.x == 0) out[blockIdx.x] = a.s;
}

extern "C" __global__ void __launch_bounds__(1024)
row_max_f32(const float* __restrict__ x, float* __restrict__ out, int cols) {
  const float* row = x + static_cast<size_t>(blockIdx.x) * cols;
  Max a = Max::identity();
  if (aligned16(x) && cols % 4 == 0)
    for_each(reinterpret_cast<const float4*>(row), cols / 4, [&](auto v) { a.add(v); });
  else
    for_each(row, cols, [&](auto v) { a.add(v); });
  a = block_reduce(a);
  if (threadIdx.x == 0) out[blockIdx.x] = a.m;
}

// ---------------------------------------------------------------------------------------------
// Long rows: one block per row. f32: block 256, one float4 (or one float) per thread in
// registers, the rest of the row in the spec's shared memory (block_x * 128 bytes: 8192 floats),
// so rows up to 9216 columns (8448 unaligned) are read once. bf16: block 128 (at 4096 columns
// softmax and LayerNorm measured 94-97% of copy against 82-85% at 256; RMSNorm 90.5 against 93),
// 16 registers per thread (4 vectors of 8 bf16: 4096 columns at 128 threads; unaligned rows: 8
// single bf16s, 1024 columns), shared memory block_x * 128 bytes (8192 bf16s): rows up to 12288
// columns (9216 unaligned) are read once. f16: as bf16 (8 halves per vector, the same columns
// in registers and shared memory).
// ---------------------------------------------------------------------------------------------

// Bound 256 (blocks of up to 256 threads): with 1024, ptxas keeps softmax_f32 to 32 registers
// and puts the cached float4 in local memory.
extern "C" __global__ void __launch_bounds__(256)
softmax_f32(const float* __restrict__ x, float* __restrict__ out, int cols) {
  softmax_rows<Block, 4, 1>(x, out, gridDim.x, cols);
}

extern "C" __global__ void __launch_bounds__(1024)
layernorm_f32(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
              float* __restrict__ out, int cols, float eps) {
  layernorm_rows<Block, 4, 1>(x, weight, bias, out, gridDim.x, cols, eps);
}

extern "C" __global__ void __launch_bounds__(1024)
rmsnorm_f32(const float* __restrict__ x, const float* __restrict__ weight, float* __restrict__ out, int cols, float eps) {
  rmsnorm_rows<Block, 4, 1>(x, weight, out, gridDim.x, cols, eps);
}

extern "C" __global__ void __launch_bounds__(1024)
softmax_bf16(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ out, int cols) {
  softmax_rows<Block, 16, 8>(x, out, gridDim.x, cols);
}

extern "C" __global__ void __launch_bounds__(1024)
layernorm_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight, const __nv_bfloat16* __restrict__ bias,
               __nv_bfloat16* __restrict__ out, int cols, float eps) {
  layernorm_rows<Block, 16, 8>(x, weight, bias, out, gridDim.x, cols, eps);
}

extern "C" __global__ void __launch_bounds__(1024)
rmsnorm_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight, __nv_bfloat16* __restrict__ out, int cols, float eps) {
  rmsnorm_rows<Block, 16, 8>(x, weight, out, gridDim.x, cols, eps);
}

extern "C" __global__ void __launch_bounds__(1024)
softmax_f16(const __half* __restrict__ x, __half* __restrict__ out, int cols) {
  softmax_rows<Block, 16, 8>(x, out, gridDim.x, cols);
}

extern "C" __global__ void __launch_bounds__(1024)
layernorm_f16(const __half* __restrict__ x, const __half* __restrict__ weight, const __half* __restrict__ bias, __half* __restrict__ out,
              int cols, float eps) {
  layernorm_rows<Block, 16, 8>(x, weight, bias, out, gridDim.x, cols, eps);
}

extern "C" __global__ void __launch_bounds__(1024)
rmsnorm_f16(const __half* __restrict__ x, const __half* __restrict__ weight, __half* __restrict__ out, int cols, float eps) {
  rmsnorm_rows<Block, 16, 8>(x, weight, out, gridDim.x, cols, eps);
}

// ---------------------------------------------------------------------------------------------
// Short rows: one warp per row. With a block per row, a 1024-column f32 row gives each of 256
// threads a single float4, and the block spends its time in barriers and reductions rather than
// in loads (softmax_f32 measured 77% of copy at 65536 x 1024). Here each warp owns a row: a lane
// keeps 32 registers of it (8 vectors: 1024 f32 or 2048 bf16 columns; 32 single elements: 1024
// columns), reduces with shuffles only (no barrier, no shared memory) and writes from the
// registers. layernorm_warp_bf16 keeps 16 registers (1024 columns): with 32 it measured 83.0% of
// copy at 65536 x 1024 against 94.6% with 16 (H100; rmsnorm_warp_bf16 95.3% either way, and
// faster with 32 at 2048 columns). softmax_warp_bf16 keeps 32 with at most 64 registers a
// thread (see there): 95.2% at 65536 x 1024 and 94.2% at 32768 x 2048, against 95.4% and 88.9%
// with 16 registers of row, 91.5% and 95.9% with 32 at 80 registers a thread. Longer rows stay
// correct: the elements past the registers are read twice from global memory (a warp's row is
// recent enough to be in L2), but block-per-row kernels suit them better. Block: a multiple of
// 32 up to 256 (the spec says 256, 8 rows per block, for f32; 128, 4 rows, for bf16: up to 3%
// faster at 1024 and 2048 columns); the bound leaves a lane the registers for its cache (at
// 1024 threads, 64 registers, LayerNorm spilled). The f16 kernels copy the bf16 ones' choices
// (registers of row, bounds, block 128): the same bytes per lane.
// ---------------------------------------------------------------------------------------------

extern "C" __global__ void __launch_bounds__(256)
softmax_warp_f32(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
  softmax_rows<Warp, 32, 32>(x, out, rows, cols);
}

extern "C" __global__ void __launch_bounds__(256)
layernorm_warp_f32(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
                   float* __restrict__ out, int rows, int cols, float eps) {
  layernorm_rows<Warp, 32, 32>(x, weight, bias, out, rows, cols, eps);
}

// 32 registers of row (2048 columns) with the bound (256, 4): at most 64 registers a thread
// (ptxas spills 8 bytes), so at least 32 warps per SM. With 80 registers a thread (an earlier
// build's choice) the 1024-column rows lost 4 to 22 points of copy.
extern "C" __global__ void __launch_bounds__(256, 4)
softmax_warp_bf16(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ out, int rows, int cols) {
  softmax_rows<Warp, 32, 16>(x, out, rows, cols);
}

extern "C" __global__ void __launch_bounds__(256)
layernorm_warp_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight, const __nv_bfloat16* __restrict__ bias,
                    __nv_bfloat16* __restrict__ out, int rows, int cols, float eps) {
  layernorm_rows<Warp, 16, 16>(x, weight, bias, out, rows, cols, eps);
}

extern "C" __global__ void __launch_bounds__(256)
rmsnorm_warp_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight, __nv_bfloat16* __restrict__ out, int rows, int cols, float eps) {
  rmsnorm_rows<Warp, 32, 32>(x, weight, out, rows, cols, eps);
}

// As softmax_warp_bf16, bound included: 32 registers of row need the cap at 64 a thread.
extern "C" __global__ void __launch_bounds__(256, 4)
softmax_warp_f16(const __half* __restrict__ x, __half* __restrict__ out, int rows, int cols) {
  softmax_rows<Warp, 32, 16>(x, out, rows, cols);
}

extern "C" __global__ void __launch_bounds__(256)
layernorm_warp_f16(const __half* __restrict__ x, const __half* __restrict__ weight, const __half* __restrict__ bias, __half* __restrict__ out,
                   int rows, int cols, float eps) {
  layernorm_rows<Warp, 16, 16>(x, weight, bias, out, rows, cols, eps);
}

extern "C" __global__ void __launch_bounds__(256)
rmsnorm_warp_f16(const __half* __restrict__ x, const __half* __restrict__ weight, __half* __restrict__ out, int rows, int cols, float eps) {
  rmsnorm_rows<Warp, 32, 32>(x, weight, out, rows, cols, eps);
}
