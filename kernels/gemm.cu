// Tensor-core GEMM, c[M, N] (f32) = a[M, K] @ b[K, N], a and b row-major bf16 or f16, f32 accumulation;
// and bf16 ones with fused epilogues for a transformer: h = bf16(gelu(a @ b + bias)) (GELU's tanh or erf form),
// h = bf16(a @ b + bias), h = bf16(bf16(a @ b + bias) + residual) and c = (a @ b + bias) + residual;
// and a batched bf16 one,
// c[z] = a[z] @ b[z] for z = blockIdx.z (attention's batch matmuls). The entry points are at the
// end; the epilogues (PlainF32 ...) are what differs between them. The persistent bf16 kernels
// also come with b [N, K], a Linear's weight as stored (gemm_nt_*_persistent: its tiles loaded
// and multiplied K-major, kNK), and the Linear's bias in bf16.
//
// One block computes a BM x BN = 128 x 256 tile of c with 384 threads; one kernel body per
// architecture, chosen at compile time:
//
// - sm_90a (Hopper, __CUDA_ARCH_FEAT_SM90_ALL): warp-specialized wgmma. One thread of warpgroup 0
//   loads tiles with TMA (cp.async.bulk.tensor) into a ring of GEMM_STAGES shared-memory stages,
//   128-byte swizzled (the layout wgmma reads); warpgroups 1 and 2 each multiply a 64 x 256 half
//   of the tile with wgmma.m64n256k16 (A K-major, B N-major: b's rows are read as they lie in
//   memory), the accumulators in registers. Full/empty mbarriers per stage hand stages between
//   them. Blocks run in clusters of GEMM_CLUSTER along M that need the same B tiles: each block
//   loads 1/CLUSTER of every B tile and multicasts it to the whole cluster.
//   IREE passes only buffers and 32-bit constants, so the TMA tensor maps can't come from the
//   host (cuTensorMapEncodeTiled): each block builds them in shared memory with
//   tensormap.replace and publishes them to global memory inside its own tile of c, which it
//   overwrites with results at the end (see build_tensor_maps). Measured numbers: docs/gemm.md.
// - everything else (sm_80 ...): WMMA (mma.sync) on 8 warps, 64 x 64 per warp, double-buffered
//   shared memory filled by all 384 threads. Same block size and grid as the sm_90a body (the
//   spec declares those per kernel); its own, smaller shared memory (the spec's is per arch).
//
// Any M, N, K >= 1 is correct. TMA needs K % 8 == 0, N % 8 == 0 and 16-byte aligned a and b
// (row strides and addresses in 16-byte units), and room in c for the maps (a tile at least 96
// columns wide, for every block of the cluster with rows inside M; gemm_batched_bf16 also takes a
// tile that spans whole rows (N <= 256), the maps anywhere in those rows); otherwise the same kernel
// loads element by element with bounds checks. Out-of-range elements of a tile are zero (TMA fills
// them), so they add nothing; out-of-range outputs are not written. gemm_batched_bf16 runs the
// same body per batch on that batch's matrices (a, b, c offset by z M K, z K N, z M N elements),
// and does not load B's 64-column boxes that lie wholly past N (BatchedF32).
//
// Launch (kernels/gemm.toml): block 384, grid (ceildiv(N, 256), 2 * ceildiv(M, 256)) (and B along
// z for gemm_batched_bf16), dynamic shared memory gemm::SMEM_BYTES of the arch: 197632 on sm_90a
// (4 stages of 48 KB), 62592 otherwise. The -D options below exist for benchmarks/gemm.py, which
// times other configurations; the spec must change with them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <stdint.h>

#include "gelu.cuh"
#include "sm90_pipeline.cuh"

#ifndef GEMM_BN
#define GEMM_BN 256  // tile columns; 128 and 192 also work (kernels/gemm_n128.toml, gemm_n192.toml build them so)
#endif
#ifndef GEMM_CLUSTER
#define GEMM_CLUSTER 2  // sm_90a: blocks per cluster along M sharing B tiles (1, 2 or 4); grid y a multiple
#endif
#ifndef GEMM_STAGES
#define GEMM_STAGES 4  // stages of the sm_90a ring: 4 x 48 KB (sm_90a has 227 KB per block)
#endif
#ifndef GEMM_PERSISTENT_STAGES
#define GEMM_PERSISTENT_STAGES 3  // stages of the persistent kernels' ring (beside their two staging buffers)
#endif
#ifndef GEMM_WGMMA_IN_FLIGHT
#define GEMM_WGMMA_IN_FLIGHT 0  // 1: consumers keep one stage's wgmma group in flight, releasing the stage before
#endif

namespace gemm {

using namespace sm90_pipeline;  // smem_addr, mbarriers, cluster, TMA loads, load_chunk_checked

constexpr int BM = 128, BN = GEMM_BN, BK = 64, STAGES = GEMM_STAGES, THREADS = 384, CLUSTER = GEMM_CLUSTER;
constexpr int A_STAGE_BYTES = BM * BK * 2;  // 16 KB
constexpr int B_STAGE_BYTES = BK * BN * 2;  // 32 KB at BN = 256
constexpr int STAGE_BYTES = A_STAGE_BYTES + B_STAGE_BYTES;
static_assert(BN == 128 || BN == 192 || BN == 256, "GEMM_BN must be 128, 192 or 256");
static_assert((CLUSTER == 1 || CLUSTER == 2 || CLUSTER == 4) && BN / CLUSTER >= 64, "a B part must be whole 64-column swizzle atoms");

// True when every 16-byte chunk of a and b rows can be copied whole (see the header comment).
__device__ __forceinline__ bool vector_loads_ok(const void* a, const void* b, int N, int K) {
  return (K % 8 == 0) && (N % 8 == 0) && ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) % 16 == 0);
}

// What a kernel does with each accumulated value v of c[row, col] and where it goes: an epilogue
// has the output type Out, its pointer `out` ([M, N], row-major), apply(row, col, v) for one
// element, and, for 4 consecutive columns at once, store4 (16-byte loads of bias and residual,
// one 16- or 8-byte store) where vec_ok says every pointer is aligned for it.
//   gemm_bf16/f16:          c = v                                     (f32)
//   gemm_bias_gelu_bf16:    h = bf16(gelu_tanh(v + bias[col]))         (the fast GELU, as bias_gelu_f32_bf16)
//   gemm_bias_gelu_erf_bf16: h = bf16(gelu_erf(v + bias[col]))         (exact GELU, erff)
//   gemm_bias_bf16:         h = bf16(v + bias[col])                    (one rounding)
//   gemm_bias_residual_f32: c = (v + bias[col]) + residual[row, col]  (residual must not alias c)
//   gemm_bias_residual_bf16: h = bf16(float(bf16(v + bias[col])) + float(residual[row, col]))
//                           (gemm_bias_bf16's value, then a bf16 model's residual add: in f32, rounded once)
//   gemm_nt_bf16_persistent: h = bf16(v)                                (one rounding)
__device__ __forceinline__ bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }
// A bias element as f32: the f32 bias of the [K, N] kernels, or a bf16 model's own bias (the
// NT persistent kernels'), widened exactly.
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

struct PlainF32 {
  using Out = float;
  float* out;
  __device__ __forceinline__ float apply(int, int, float v) const { return v; }
  __device__ __forceinline__ bool vec_ok() const { return aligned(out, 16); }
  __device__ __forceinline__ void store4(int row, int col, int N, float4 v) const {
    *reinterpret_cast<float4*>(out + size_t(row) * N + col) = v;
  }
};
template <typename Act, typename Bias = float>
struct BiasActBf16 {
  using Out = __nv_bfloat16;
  const Bias* bias;
  __nv_bfloat16* out;
  __device__ __forceinline__ float apply(int, int col, float v) const { return Act::apply(v + to_f32(bias[col])); }
  __device__ __forceinline__ bool vec_ok() const { return aligned(bias, 16) && aligned(out, 8); }
  __device__ __forceinline__ void store4(int row, int col, int N, float4 v) const {
    static_assert(__is_same(Bias, float), "16-byte bias loads: an f32 bias");
    const float4 b = *reinterpret_cast<const float4*>(bias + col);
    const __nv_bfloat162 lo = __floats2bfloat162_rn(Act::apply(v.x + b.x), Act::apply(v.y + b.y));
    const __nv_bfloat162 hi = __floats2bfloat162_rn(Act::apply(v.z + b.z), Act::apply(v.w + b.w));
    uint2 packed;
    packed.x = *reinterpret_cast<const uint32_t*>(&lo);
    packed.y = *reinterpret_cast<const uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(out + size_t(row) * N + col) = packed;
  }
};
using BiasGeluBf16 = BiasActBf16<GeluTanh>;
using BiasGeluErfBf16 = BiasActBf16<GeluErf>;
using BiasBf16 = BiasActBf16<NoActivation>;
// h = bf16(v): a bf16 Linear without bias (the model's matmul and its truncf); persistent body only.
struct PlainBf16 {
  using Out = __nv_bfloat16;
  __nv_bfloat16* out;
  __device__ __forceinline__ float apply(int, int, float v) const { return v; }
};
struct BiasResidualF32 {
  using Out = float;
  const float* bias;
  const float* residual;
  float* out;
  int N;
  __device__ __forceinline__ float apply(int row, int col, float v) const { return (v + bias[col]) + residual[size_t(row) * N + col]; }
  __device__ __forceinline__ bool vec_ok() const { return aligned(bias, 16) && aligned(residual, 16) && aligned(out, 16); }
  __device__ __forceinline__ void store4(int row, int col, int N, float4 v) const {
    const float4 b = *reinterpret_cast<const float4*>(bias + col);
    const float4 r = *reinterpret_cast<const float4*>(residual + size_t(row) * N + col);
    *reinterpret_cast<float4*>(out + size_t(row) * N + col) = make_float4((v.x + b.x) + r.x, (v.y + b.y) + r.y, (v.z + b.z) + r.z, (v.w + b.w) + r.w);
  }
};
// gemm_bias_bf16's result followed by a bf16 residual add, as the model computes that add (the
// two bf16 values widened, added in f32, rounded once): the same bits as gemm_bias_bf16 and then
// the add, without writing and reading back the intermediate. residual [M, N] bf16, not aliasing out.
template <typename Bias = float>
struct BiasResidualBf16 {
  using Out = __nv_bfloat16;
  const Bias* bias;
  const __nv_bfloat16* residual;
  __nv_bfloat16* out;
  int N;
  static __device__ __forceinline__ float add(float biased, float r) { return __bfloat162float(__float2bfloat16_rn(biased)) + r; }
  __device__ __forceinline__ float apply(int row, int col, float v) const {
    return add(v + to_f32(bias[col]), __bfloat162float(residual[size_t(row) * N + col]));
  }
  __device__ __forceinline__ bool vec_ok() const { return aligned(bias, 16) && aligned(residual, 8) && aligned(out, 8); }
  __device__ __forceinline__ void store4(int row, int col, int N, float4 v) const {
    static_assert(__is_same(Bias, float), "16-byte bias loads: an f32 bias");
    const float4 b = *reinterpret_cast<const float4*>(bias + col);
    const uint2 r = *reinterpret_cast<const uint2*>(residual + size_t(row) * N + col);
    const float2 r01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&r.x));
    const float2 r23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&r.y));
    const __nv_bfloat162 lo = __floats2bfloat162_rn(add(v.x + b.x, r01.x), add(v.y + b.y, r01.y));
    const __nv_bfloat162 hi = __floats2bfloat162_rn(add(v.z + b.z, r23.x), add(v.w + b.w, r23.y));
    uint2 packed;
    packed.x = *reinterpret_cast<const uint32_t*>(&lo);
    packed.y = *reinterpret_cast<const uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(out + size_t(row) * N + col) = packed;
  }
  // The persistent body's form: gemm_bias_bf16's value is what it stages (rounded to bf16 there),
  // and the residual is added where it stores 16-byte vectors of the staged rows (coalesced reads
  // of the residual, not one 2-byte read per accumulator).
  static constexpr bool kResidualAtStore = true;
  __device__ __forceinline__ float staged(int, int col, float v) const { return v + to_f32(bias[col]); }
  __device__ __forceinline__ uint4 finish(size_t at, uint4 staged8) const {
    uint4 r;
    if (aligned(residual, 16)) {
      r = *reinterpret_cast<const uint4*>(residual + at);
    } else {  // IREE bindings and torch views are only element-aligned
      const uint16_t* r16 = reinterpret_cast<const uint16_t*>(residual + at);
      r = make_uint4(r16[0] | (uint32_t(r16[1]) << 16), r16[2] | (uint32_t(r16[3]) << 16), r16[4] | (uint32_t(r16[5]) << 16),
                     r16[6] | (uint32_t(r16[7]) << 16));
    }
    const uint32_t* h = &staged8.x;
    const uint32_t* rr = &r.x;
    uint4 result;
    uint32_t* o = &result.x;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 hv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(h + i));
      const float2 rv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(rr + i));
      const __nv_bfloat162 sum = __floats2bfloat162_rn(hv.x + rv.x, hv.y + rv.y);
      o[i] = *reinterpret_cast<const uint32_t*>(&sum);
    }
    return result;
  }
};

// gemm_batched_bf16: c = v, as PlainF32, for one batch's c, with the sm_90a body's two provisions
// for N narrower than a tile (attention's N = 64; kNarrowN): where the tile spans whole rows of c
// (n0 == 0, N <= BN) its tensor maps may go anywhere in the tile's rows, not only in its first row
// (see tensor_map_home); and B's 64-column boxes that start at or past N are not loaded at all.
struct BatchedF32 : PlainF32 {
  static constexpr bool kNarrowN = true;
};
// E::kNarrowN where the epilogue declares it, else false (the other kernels: maps in the tile's
// first row only, every B box of the tile loaded).
template <typename E, typename = void>
struct NarrowN {
  static constexpr bool value = false;
};
template <typename E>
struct NarrowN<E, decltype(void(E::kNarrowN))> {
  static constexpr bool value = E::kNarrowN;
};
// E::kResidualAtStore where the epilogue declares it (BiasResidualBf16), else false: the persistent
// body stages ep.apply's value and stores it as it is.
template <typename E, typename = void>
struct ResidualAtStore {
  static constexpr bool value = false;
};
template <typename E>
struct ResidualAtStore<E, decltype(void(E::kResidualAtStore))> {
  static constexpr bool value = E::kResidualAtStore;
};

__device__ __forceinline__ void store1(float* p, float v) { *p = v; }
__device__ __forceinline__ void store1(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// Results for c[row, col .. col + 3]: one store4 where `vec` (N % 4 == 0 and the epilogue's
// pointers aligned; col is a multiple of 4, so the four are inside N together), else element by
// element within N.
template <typename E>
__device__ __forceinline__ void store_chunk(const E& ep, int N, bool vec, int row, int col, float4 v) {
  if (vec && col < N) {
    ep.store4(row, col, N, v);
    return;
  }
  const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (col + i < N) store1(ep.out + size_t(row) * N + col + i, ep.apply(row, col + i, e[i]));
}

}  // namespace gemm

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace gemm {

static_assert(THREADS == 3 * 128, "one producer and two consumer warpgroups");
// + 1024: the dynamic shared memory base is only 16-byte aligned; swizzled tiles need 1024.
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 1024;  // 197632 at the defaults

// d[128] += A(desc) * B(desc) for one m64n256k16 tile; TY is bf16 or f16; TRANS_B "1": B N-major
// (b [K, N] as stored), "0": K-major (b [N, K], a Linear's weight). Generated operand lists.
#define GEMM_DEFINE_WGMMA_N256(NAME, TY, TRANS_B) \
  __device__ __forceinline__ void NAME(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, " TRANS_B ";\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
                   "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
                   "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
                   "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
                   "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
                   "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d)); \
  }

// d[64] += A(desc) * B(desc) for one m64n128k16 tile; TY and TRANS_B as for N256. Generated operand lists.
#define GEMM_DEFINE_WGMMA_N128(NAME, TY, TRANS_B) \
  __device__ __forceinline__ void NAME(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, " TRANS_B ";\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d)); \
  }

// d[96] += A(desc) * B(desc) for one m64n192k16 tile; TY and TRANS_B as for N256. Generated operand lists.
#define GEMM_DEFINE_WGMMA_N192(NAME, TY, TRANS_B) \
  __device__ __forceinline__ void NAME(float (&d)[96], uint64_t desc_a, uint64_t desc_b, int scale_d) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n192k16.f32." TY "." TY " " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, 1, 0, " TRANS_B ";\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
                   "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
                   "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]) \
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d)); \
  }

GEMM_DEFINE_WGMMA_N256(wgmma_n256_bf16, "bf16", "1")
GEMM_DEFINE_WGMMA_N256(wgmma_n256_f16, "f16", "1")
GEMM_DEFINE_WGMMA_N256(wgmma_n256_bf16_kmajor, "bf16", "0")
GEMM_DEFINE_WGMMA_N128(wgmma_n128_bf16, "bf16", "1")
GEMM_DEFINE_WGMMA_N128(wgmma_n128_f16, "f16", "1")
GEMM_DEFINE_WGMMA_N128(wgmma_n128_bf16_kmajor, "bf16", "0")
GEMM_DEFINE_WGMMA_N192(wgmma_n192_bf16, "bf16", "1")
GEMM_DEFINE_WGMMA_N192(wgmma_n192_f16, "f16", "1")
GEMM_DEFINE_WGMMA_N192(wgmma_n192_bf16_kmajor, "bf16", "0")

// kNK: b is [N, K] (K-major B tiles); only bf16 kernels read it so.
template <typename T, bool kNK = false>
__device__ __forceinline__ void wgmma_tile(float (&d)[BN / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  static_assert(!kNK || __is_same(T, __nv_bfloat16), "[N, K] b: bf16 only");
#if GEMM_BN == 256
  if constexpr (kNK) wgmma_n256_bf16_kmajor(d, desc_a, desc_b, scale_d);
  else if constexpr (__is_same(T, __nv_bfloat16)) wgmma_n256_bf16(d, desc_a, desc_b, scale_d);
  else wgmma_n256_f16(d, desc_a, desc_b, scale_d);
#elif GEMM_BN == 192
  if constexpr (kNK) wgmma_n192_bf16_kmajor(d, desc_a, desc_b, scale_d);
  else if constexpr (__is_same(T, __nv_bfloat16)) wgmma_n192_bf16(d, desc_a, desc_b, scale_d);
  else wgmma_n192_f16(d, desc_a, desc_b, scale_d);
#else
  if constexpr (kNK) wgmma_n128_bf16_kmajor(d, desc_a, desc_b, scale_d);
  else if constexpr (__is_same(T, __nv_bfloat16)) wgmma_n128_bf16(d, desc_a, desc_b, scale_d);
  else wgmma_n128_f16(d, desc_a, desc_b, scale_d);
#endif
}

// Pins the accumulators in registers across the asynchronous wgmma (as CUTLASS's
// warpgroup_fence_operand): without it ptxas may move them and serialize the wgmmas (C7515).
__device__ __forceinline__ void fence_operands(float (&d)[BN / 2]) {
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// wgmma shared-memory matrix descriptor, 128-byte swizzle: start, leading and stride byte
// offsets in 16-byte units, swizzle mode 1 (128-byte) in bits 62-63 (PTX ISA, "Matrix
// Descriptor Format").
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t leading, uint32_t stride) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((leading & 0x3FFFF) >> 4) << 16) |
         (uint64_t((stride & 0x3FFFF) >> 4) << 32) | (uint64_t(1) << 62);
}

// Byte offsets inside a stage, all in 1024-byte swizzle atoms: 8 rows of 128 bytes, where
// 16-byte chunk c of row r is stored at chunk c ^ r (wgmma's 128-byte swizzle, XORing address
// bits [4:6] with [7:9]; TMA's CU_TENSOR_MAP_SWIZZLE_128B writes the same; atoms are 1024-aligned).
// A (BM x BK, K-major): row m at m * 128 bytes, 8-row atoms 1024 apart (the descriptor's stride).
__device__ __forceinline__ uint32_t a_offset(int m, int chunk) { return m * 128 + ((chunk ^ (m & 7)) << 4); }
// B (BK x BN, N-major): atom (k / 8, n / 64) at ((n / 64) * BK / 8 + k / 8) * 1024, row k % 8 of
// the atom holds b[k, n..n+63]. Atoms along K are 1024 apart (stride), along N 8 KB (leading):
// each 64-column block of the tile is one TMA box of BK x 64.
__device__ __forceinline__ uint32_t b_offset(int k, int n_chunk) {
  return (((n_chunk >> 3) * (BK / 8) + (k >> 3)) << 10) + ((k & 7) << 7) + (((n_chunk & 7) ^ (k & 7)) << 4);
}
// B of b [N, K] (kNK, K-major): laid out as A, row n of the tile at n * 128 bytes (a_offset(n, ...));
// its 64-row blocks are TMA boxes of 64 rows x BK, B_BLOCK_BYTES each, as the N-major blocks are.
constexpr uint32_t A_ATOM = 1024, B_LEADING = (BK / 8) * 1024, B_STRIDE = 1024, B_BLOCK_BYTES = BK * 64 * 2;

// ---- Tensor maps built on the device (sm90_pipeline::encode_tensor_map) -------------------
// Where a block publishes its two tensor maps (TMA reads maps from global memory only, and IREE
// gives the kernel no scratch buffer): 256 bytes, 128-byte aligned, inside row m0 of the block's
// own tile of the output, which nothing else touches until this block writes its results over
// them. Null if the tile has no such room (outside M, or under 96 f32 / 192 bf16 columns).
// With span_rows (gemm_batched_bf16), a tile that spans whole rows of the output (n0 == 0 and
// N <= BN) owns the contiguous bytes of its rows m0 .. min(m0 + BM, M) - 1, and the maps may lie
// anywhere in them: an N = 64 f32 output (256-byte rows) then needs no 128-byte aligned rows.
template <typename Out>
__device__ __forceinline__ uint8_t* tensor_map_home(Out* out, int M, int N, int m0, int n0, bool span_rows = false) {
  if (m0 >= M) return nullptr;
  const uintptr_t row = reinterpret_cast<uintptr_t>(out + size_t(m0) * N);
  const uintptr_t begin = row + uintptr_t(n0) * sizeof(Out);
  const uintptr_t end = span_rows && n0 == 0 && N <= BN ? reinterpret_cast<uintptr_t>(out + size_t(min(m0 + BM, M)) * N)
                                                        : row + uintptr_t(min(n0 + BN, N)) * sizeof(Out);
  const uintptr_t home = (begin + 127) & ~uintptr_t(127);
  return home + 256 <= end ? reinterpret_cast<uint8_t*>(home) : nullptr;
}

// Warp 0 of the producer: A's map (boxes of 128 rows x 64 columns) and B's (64 x 64) into
// `home` and home + 128, released to the tensor-map proxy for this CTA's own use.
template <typename T, bool kNK = false>
__device__ __forceinline__ void build_tensor_maps(uint64_t (&staging)[2][16], uint8_t* home, const T* a, const T* b, int M, int N, int K) {
  const int lane = threadIdx.x % 32;
  (&staging[0][0])[lane] = 0;
  __syncwarp();
  if (lane == 0) {
    encode_tensor_map<T>(smem_addr(staging[0]), a, M, K, uint64_t(K) * 2, BM);
    if constexpr (kNK) encode_tensor_map<T>(smem_addr(staging[1]), b, N, K, uint64_t(K) * 2, 64);  // 64 rows x BK
    else encode_tensor_map<T>(smem_addr(staging[1]), b, K, N, uint64_t(N) * 2, BK);
  }
  __syncwarp();
  for (int i = 0; i < 2; ++i) {
    asm volatile("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.cta.sync.aligned [%0], [%1], 128;\n" ::"l"(home + 128 * i),
                 "r"(smem_addr(staging[i]))
                 : "memory");
  }
}

// One stage filled element by element, bounds-checked, by the 128 threads of the producer
// warpgroup (t: the thread's index among them): A's rows m0 .. m0 + BM - 1 and B's columns
// n0 .. n0 + BN - 1 at K columns k0 .. k0 + BK - 1, zeros past M, N and K, in the swizzled
// layout wgmma reads; then fenced for the async proxy (written through the generic one).
template <typename T, bool kNK = false>
__device__ __forceinline__ void load_stage_checked(const T* a, const T* b, uint32_t sa, uint32_t sb, int m0, int n0, int k0, int M, int N, int K, int t) {
  const uint16_t* a16 = reinterpret_cast<const uint16_t*>(a);
  const uint16_t* b16 = reinterpret_cast<const uint16_t*>(b);
  for (int id = t; id < BM * (BK / 8); id += 128) {
    const int m = id / (BK / 8), chunk = id % (BK / 8), gm = m0 + m;
    const uint4 v = load_chunk_checked(a16 + size_t(gm < M ? gm : 0) * K, gm < M, k0 + chunk * 8, K);
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(sa + a_offset(m, chunk)), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
  }
  for (int id = t; id < BK * (BN / 8); id += 128) {
    if constexpr (kNK) {  // B's rows n0 .. n0 + BN - 1 of b [N, K], laid out as A's
      const int n = id / (BK / 8), chunk = id % (BK / 8), gn = n0 + n;
      const uint4 v = load_chunk_checked(b16 + size_t(gn < N ? gn : 0) * K, gn < N, k0 + chunk * 8, K);
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(sb + a_offset(n, chunk)), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
    } else {
      const int k = id / (BN / 8), chunk = id % (BN / 8), gk = k0 + k;
      const uint4 v = load_chunk_checked(b16 + size_t(gk < K ? gk : 0) * N, gk < K, n0 + chunk * 8, N);
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(sb + b_offset(k, chunk)), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
    }
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// One stage's products added into a consumer warpgroup's accumulators and committed as one
// wgmma group: its 64 rows of A at sa, B at sb. first_scale: the scale-d of the stage's first
// product (0 overwrites d, 1 accumulates); the others accumulate.
template <typename T, bool kNK = false>
__device__ __forceinline__ void multiply_stage(float (&d)[BN / 2], uint32_t sa, uint32_t sb, int first_scale) {
  fence_operands(d);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int ks = 0; ks < BK / 16; ++ks) {
    // K step of 16: 32 bytes along A's swizzled rows; two 8-row atoms down an N-major B, 32 bytes
    // along a K-major B's rows.
    const uint64_t desc_b = kNK ? make_desc(sb + ks * 32, 16, A_ATOM) : make_desc(sb + ks * 2 * B_STRIDE, B_LEADING, B_STRIDE);
    wgmma_tile<T, kNK>(d, make_desc(sa + ks * 32, 16, A_ATOM), desc_b, ks > 0 ? 1 : first_scale);
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// The sm_90a body. The CTAs of a cluster (CLUSTER of them stacked along M, same n0) need the
// same B tiles: of the `active` ones (those whose rows start inside M), CTA r loads B's 64-column
// blocks r, r + active, ... of each stage once and multicasts them into every active CTA, so each
// reads 16 KB + 32 KB / active per K step from L2 instead of 48 KB. Barriers per stage s:
//   full[s]:  the stage is loaded: with TMA, one arrival (the producer's expect_tx) and the
//             stage's bytes, from this CTA's loads and the peers' multicasts; on the
//             element-by-element path, the 128 producer threads' arrivals;
//   empty[s]: every consumer warp of every active CTA is done with stage s, so each of them
//             may load into it, and multicast into the peers' (8 * active arrivals).
template <typename T, typename E>
__device__ __forceinline__ void gemm_sm90(const T* __restrict__ a, const T* __restrict__ b, const E& ep, int M, int N, int K) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
  __shared__ __align__(128) uint64_t map_staging[2][16];
  // Same offset in every CTA: multicast copies land at the address each CTA reads.
  const uint32_t smem = (smem_addr(smem_raw) + 1023) & ~1023u;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int k_tiles = (K + BK - 1) / BK;
  const int warpgroup = threadIdx.x / 128, t = threadIdx.x % 128;
  const uint32_t rank = cluster_rank();
  // The cluster's CTAs whose rows start inside M: ranks [0, active) (the cluster's first always
  // does). The others (M not a multiple of CLUSTER * BM) have nothing to load or compute.
  const int cluster_m0 = (blockIdx.y - rank) * BM;
  const int active = min(CLUSTER, (M - cluster_m0 + BM - 1) / BM);
  // TMA for all active CTAs of the cluster or none of them: they fill each other's B tiles.
  bool tma = vector_loads_ok(a, b, N, K);
  constexpr bool narrow_n = NarrowN<E>::value;
  for (int r = 0; r < active; ++r) tma = tma && tensor_map_home(ep.out, M, N, cluster_m0 + r * BM, n0, narrow_n) != nullptr;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(smem_addr(&full[s]), tma ? 1 : 128);
      mbar_init(smem_addr(&empty[s]), 8 * active);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  cluster_sync();  // the peers' barriers exist before anyone arrives on them

  if (int(rank) >= active) {
    // Nothing to do; waits for the cluster below.
  } else if (warpgroup == 0) {
    // Producer. Registers move from the producer to the consumers (needs __launch_bounds__(384, 1)):
    // 128 x 88 + 256 x 208 = 384 x 168, all the block was given; both compile without spills.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 88;\n");
    if (tma) {
      if (t < 32) {
        uint8_t* home = tensor_map_home(ep.out, M, N, m0, n0, narrow_n);
        build_tensor_maps<T>(map_staging, home, a, b, M, N, K);
        if (t == 0) {
          const void *map_a = home, *map_b = home + 128;
          asm volatile("fence.proxy.tensormap::generic.acquire.cta [%0], 128;\n" ::"l"(map_a) : "memory");
          asm volatile("fence.proxy.tensormap::generic.acquire.cta [%0], 128;\n" ::"l"(map_b) : "memory");
          const uint16_t active_mask = (1u << active) - 1;
          // B's 64-column blocks to load: all of the tile's; with NarrowN only those starting
          // inside N (the same for every CTA of the cluster: same n0). A block past N would be TMA
          // zeros; unloaded, its shared memory holds stale bytes instead, which reach only the
          // accumulator columns past N, never stored.
          const int b_blocks = narrow_n ? min(BN / 64, (N - n0 + 63) / 64) : BN / 64;
          const uint32_t stage_tx = narrow_n ? A_STAGE_BYTES + b_blocks * B_BLOCK_BYTES : STAGE_BYTES;
          for (int kt = 0; kt < k_tiles; ++kt) {
            const int s = kt % STAGES;
            if (kt >= STAGES) mbar_wait(smem_addr(&empty[s]), ((kt / STAGES) - 1) & 1);
            const uint32_t sa = smem + s * STAGE_BYTES, sb = sa + A_STAGE_BYTES, bar = smem_addr(&full[s]);
            mbar_arrive_expect_tx(bar, stage_tx);  // own A, and all of B from the cluster
            tma_load(sa, map_a, kt * BK, m0, bar);
            // This CTA's share of B's 64-column blocks, multicast to the active CTAs.
            for (int block = rank; block < b_blocks; block += active) {
              if (active > 1) tma_load_multicast(sb + block * B_BLOCK_BYTES, map_b, n0 + block * 64, kt * BK, bar, active_mask);
              else tma_load(sb + block * B_BLOCK_BYTES, map_b, n0 + block * 64, kt * BK, bar);
            }
          }
        }
      }
    } else {
      // Element by element, bounds-checked: every CTA loads its whole B tile itself.
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % STAGES;
        if (kt >= STAGES) mbar_wait(smem_addr(&empty[s]), ((kt / STAGES) - 1) & 1);
        const uint32_t sa = smem + s * STAGE_BYTES;
        load_stage_checked<T>(a, b, sa, sa + A_STAGE_BYTES, m0, n0, kt * BK, M, N, K, t);
        mbar_arrive(smem_addr(&full[s]));
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 208;\n");
    const int half = warpgroup - 1;  // rows [64 * half, 64 * half + 64) of the tile
    float d[BN / 2];
#if GEMM_WGMMA_IN_FLIGHT
    // No zero-fill: the first product overwrites d (scale-d 0). A move into d while a group is in
    // flight would make ptxas serialize the wgmmas (C7515).
#else
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;
#endif
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = kt % STAGES;
      mbar_wait(smem_addr(&full[s]), (kt / STAGES) & 1);
      multiply_stage<T>(d, smem + s * STAGE_BYTES + half * 64 * 128, smem + s * STAGE_BYTES + A_STAGE_BYTES, GEMM_WGMMA_IN_FLIGHT ? kt > 0 : 1);
#if GEMM_WGMMA_IN_FLIGHT
      // This stage's group stays in flight; the previous stage's is done and its stage released.
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
      fence_operands(d);
      if (t % 32 == 0 && kt > 0) {
        for (int r = 0; r < active; ++r) mbar_arrive_remote(peer_addr(smem_addr(&empty[(kt - 1) % STAGES]), r));
      }
#else
      // Wait for this stage's products before releasing it; the tensor cores stay busy meanwhile
      // with the other consumer warpgroup's wgmmas.
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      fence_operands(d);
      if (t % 32 == 0) {
        for (int r = 0; r < active; ++r) mbar_arrive_remote(peer_addr(smem_addr(&empty[s]), r));
      }
#endif
    }
#if GEMM_WGMMA_IN_FLIGHT
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    fence_operands(d);
#endif

    // The tile goes out through shared memory, so that global stores (and the epilogue's bias and
    // residual loads) are whole 16-byte vectors along rows, 512 contiguous bytes per warp: the
    // accumulators' own layout would give each warp 8 rows x 32 bytes per store. The stages are
    // free once both consumer warpgroups are past their last wgmma (every TMA into this block,
    // the peers' multicasts included, completed before that stage's full barrier).
    // Accumulator layout of m64nNk16 (PTX ISA, "wgmma D fragments"): register i of thread
    // (warp w, lane l) holds row 16 w + l / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (l % 4) + i % 2.
    // Rows are padded by 8 floats (stride 1056 bytes), so a warp's 8 rows hit different banks.
    constexpr int kStride = BN + 8;
    static_assert(BM * kStride * 4 <= STAGES * STAGE_BYTES, "the staged tile must fit in the stages");
    float* tile = reinterpret_cast<float*>(smem_raw + (smem - smem_addr(smem_raw)));
    const int warp = t / 32, lane = t % 32;
    asm volatile("bar.sync 1, 256;\n" ::: "memory");  // both consumer warpgroups done with the stages
#pragma unroll
    for (int i = 0; i < BN / 2; i += 2) {
      const int r = half * 64 + warp * 16 + lane / 4 + 8 * ((i / 2) % 2), c = 8 * (i / 4) + 2 * (lane % 4);
      *reinterpret_cast<float2*>(tile + r * kStride + c) = make_float2(d[i], d[i + 1]);
    }
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
    // The tile's rows hold the tensor maps: every TMA that read them has completed, so the results
    // may overwrite them.
    const int ct = threadIdx.x - 128;  // 0 .. 255 over both consumer warpgroups
    const bool vec = N % 4 == 0 && ep.vec_ok();
    constexpr int kChunks = BN / 4;  // float4s per tile row
    for (int id = ct; id < BM * kChunks; id += 256) {
      const int r = id / kChunks, c = (id % kChunks) * 4;
      if (m0 + r < M) store_chunk(ep, N, vec, m0 + r, n0 + c, *reinterpret_cast<const float4*>(tile + r * kStride + c));
    }
  }
  // No CTA leaves while a peer may still copy into its shared memory or arrive on its barriers.
  cluster_sync();
}


// The persistent sm_90a body (the *_persistent kernels): a grid of (clusters, PAIR) CTAs, fewer
// than the tiles, each cluster taking tile pairs ct = blockIdx.x, + gridDim.x, ... in turn. Tile
// pair ct is the two 128-row tiles (2 (ct / (N / BN)) + blockIdx.y) * BM at column (ct % (N / BN))
// * BN. Where a launch's kernel ends after one tile, here the fixed costs (block launch, barrier
// init, tensor maps, pipeline fill) are paid once per CTA, and the producer loads the next tile
// while the consumers finish this one: each consumer warpgroup rounds its 64 rows to bf16 into
// a staging buffer of its own (not the stages) and stores them from there as 16-byte vectors.
// Room for those buffers leaves PERSISTENT_STAGES stages. Needs M and N multiples of 2 BM and
// BN (the spec's `requires`), a bf16 output; loads by TMA where vector_loads_ok, else element
// by element (each CTA its whole B tile), as the body above.
constexpr int PERSISTENT_STAGES = GEMM_PERSISTENT_STAGES;
constexpr int EPI_STRIDE = BN + 8;              // bf16 per staged row: 16 bytes of padding against bank conflicts
constexpr int EPI_BYTES = 64 * EPI_STRIDE * 2;  // one consumer warpgroup's 64 rows
constexpr int PERSISTENT_SMEM_BYTES = PERSISTENT_STAGES * STAGE_BYTES + 2 * EPI_BYTES + 1024;  // 216064 at the defaults

// kNK: b is [N, K] (a Linear's weight as stored), its tiles loaded and multiplied K-major.
template <typename T, bool kNK, typename E>
__device__ __forceinline__ void gemm_sm90_persistent(const T* __restrict__ a, const T* __restrict__ b, const E& ep, int M, int N, int K) {
  static_assert(__is_same(typename E::Out, __nv_bfloat16), "the persistent body stages bf16 results");
  constexpr int S = PERSISTENT_STAGES;
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full[S], empty[S];
  __shared__ __align__(128) uint64_t map_staging[2][16];
  const uint32_t smem = (smem_addr(smem_raw) + 1023) & ~1023u;
  const int k_tiles = (K + BK - 1) / BK;
  const int warpgroup = threadIdx.x / 128, t = threadIdx.x % 128;
  const uint32_t rank = cluster_rank();
  constexpr int active = CLUSTER;  // every CTA's rows lie inside M (M a multiple of 2 BM)
  const int n_tiles = N / BN, pairs = n_tiles * (M / (2 * BM));
  const bool tma = vector_loads_ok(a, b, N, K);

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(smem_addr(&full[s]), tma ? 1 : 128);
      mbar_init(smem_addr(&empty[s]), 8 * active);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  cluster_sync();

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 88;\n");
    if (tma) {
      if (t < 32) {
        // The maps live in the first row of the last tile this CTA writes: nothing writes there
        // before this CTA's last epilogue, after its last load.
        const int last = blockIdx.x + ((pairs - 1 - int(blockIdx.x)) / int(gridDim.x)) * int(gridDim.x);
        uint8_t* home = tensor_map_home(ep.out, M, N, ((last / n_tiles) * 2 + int(blockIdx.y)) * BM, (last % n_tiles) * BN);
        build_tensor_maps<T, kNK>(map_staging, home, a, b, M, N, K);
        if (t == 0) {
          const void *map_a = home, *map_b = home + 128;
          asm volatile("fence.proxy.tensormap::generic.acquire.cta [%0], 128;\n" ::"l"(map_a) : "memory");
          asm volatile("fence.proxy.tensormap::generic.acquire.cta [%0], 128;\n" ::"l"(map_b) : "memory");
          const uint16_t active_mask = (1u << active) - 1;
          int g = 0;  // stages filled so far, over all tiles
          for (int ct = blockIdx.x; ct < pairs; ct += gridDim.x) {
            const int m0 = ((ct / n_tiles) * 2 + int(blockIdx.y)) * BM, n0 = (ct % n_tiles) * BN;
            for (int kt = 0; kt < k_tiles; ++kt, ++g) {
              const int s = g % S;
              if (g >= S) mbar_wait(smem_addr(&empty[s]), ((g / S) - 1) & 1);
              const uint32_t sa = smem + s * STAGE_BYTES, sb = sa + A_STAGE_BYTES, bar = smem_addr(&full[s]);
              mbar_arrive_expect_tx(bar, STAGE_BYTES);
              tma_load(sa, map_a, kt * BK, m0, bar);
              for (int block = rank; block < BN / 64; block += active) {
                // Box coordinates (column, row) of b: (n, k) for [K, N], (k, n) for [N, K].
                const int x = kNK ? kt * BK : n0 + block * 64, y = kNK ? n0 + block * 64 : kt * BK;
                if (active > 1) tma_load_multicast(sb + block * B_BLOCK_BYTES, map_b, x, y, bar, active_mask);
                else tma_load(sb + block * B_BLOCK_BYTES, map_b, x, y, bar);
              }
            }
          }
        }
      }
    } else {
      int g = 0;
      for (int ct = blockIdx.x; ct < pairs; ct += gridDim.x) {
        const int m0 = ((ct / n_tiles) * 2 + int(blockIdx.y)) * BM, n0 = (ct % n_tiles) * BN;
        for (int kt = 0; kt < k_tiles; ++kt, ++g) {
          const int s = g % S;
          if (g >= S) mbar_wait(smem_addr(&empty[s]), ((g / S) - 1) & 1);
          const uint32_t sa = smem + s * STAGE_BYTES;
          load_stage_checked<T, kNK>(a, b, sa, sa + A_STAGE_BYTES, m0, n0, kt * BK, M, N, K, t);
          mbar_arrive(smem_addr(&full[s]));
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 208;\n");
    const int half = warpgroup - 1;  // rows [64 * half, 64 * half + 64) of each tile
    const uint32_t staged_at = smem + S * STAGE_BYTES + half * EPI_BYTES;
    __nv_bfloat16* staged = reinterpret_cast<__nv_bfloat16*>(smem_raw + (staged_at - smem_addr(smem_raw)));
    const int warp = t / 32, lane = t % 32;
    int g = 0;
    for (int ct = blockIdx.x; ct < pairs; ct += gridDim.x) {
      const int m0 = ((ct / n_tiles) * 2 + int(blockIdx.y)) * BM + half * 64, n0 = (ct % n_tiles) * BN;
      float d[BN / 2];
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;
      for (int kt = 0; kt < k_tiles; ++kt, ++g) {
        const int s = g % S;
        mbar_wait(smem_addr(&full[s]), (g / S) & 1);
        multiply_stage<T, kNK>(d, smem + s * STAGE_BYTES + half * 64 * 128, smem + s * STAGE_BYTES + A_STAGE_BYTES, 1);
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        fence_operands(d);
        if (t % 32 == 0) {
          for (int r = 0; r < active; ++r) mbar_arrive_remote(peer_addr(smem_addr(&empty[s]), r));
        }
      }
      // The epilogue applied in registers (accumulator layout as in the body above), each pair
      // of columns rounded to bf16 into this warpgroup's rows; 8 rows of a warp lie 528 bytes
      // apart, 4 banks, so its 32 stores hit 32 banks.
#pragma unroll
      for (int i = 0; i < BN / 2; i += 2) {
        const int r = warp * 16 + lane / 4 + 8 * ((i / 2) % 2), c = 8 * (i / 4) + 2 * (lane % 4);
        float v0, v1;
        if constexpr (ResidualAtStore<E>::value) v0 = ep.staged(m0 + r, n0 + c, d[i]), v1 = ep.staged(m0 + r, n0 + c + 1, d[i + 1]);
        else v0 = ep.apply(m0 + r, n0 + c, d[i]), v1 = ep.apply(m0 + r, n0 + c + 1, d[i + 1]);
        *reinterpret_cast<__nv_bfloat162*>(staged + r * EPI_STRIDE + c) = __floats2bfloat162_rn(v0, v1);
      }
      asm volatile("bar.sync %0, 128;\n" ::"r"(2 + half) : "memory");
      // The tile's first row holds the tensor maps only in the CTA's last tile, whose loads have
      // all completed (their stages' full barriers were waited for).
      constexpr int kChunks = BN / 8;  // 16-byte chunks per row
      for (int id = t; id < 64 * kChunks; id += 128) {
        const int r = id / kChunks, c = (id % kChunks) * 8;
        const size_t at = size_t(m0 + r) * N + n0 + c;
        const uint4 v = *reinterpret_cast<const uint4*>(staged + r * EPI_STRIDE + c);
        if constexpr (ResidualAtStore<E>::value) *reinterpret_cast<uint4*>(ep.out + at) = ep.finish(at, v);
        else *reinterpret_cast<uint4*>(ep.out + at) = v;
      }
      asm volatile("bar.sync %0, 128;\n" ::"r"(2 + half) : "memory");  // read out before the next tile's rows go in
    }
  }
  cluster_sync();
}

}  // namespace gemm
#else  // not sm_90a: WMMA (mma.sync)
namespace gemm {

// Double-buffered tiles, K step 32, rows padded by 8 elements (16 bytes) against bank conflicts.
constexpr int WK = 32, A_LD = WK + 8, B_LD = BN + 8;
constexpr int WA_BYTES = BM * A_LD * 2, WB_BYTES = WK * B_LD * 2;
// Two buffers of each tile, a 16 x 16 float scratch tile per computing warp, + 128 to align the
// base: 62592 bytes, under the 99 KB of sm_86/sm_89, so the sm_80 PTX JIT-compiles and runs on
// every GPU from sm_80 on.
constexpr int SMEM_BYTES = 2 * (WA_BYTES + WB_BYTES) + 8 * 16 * 16 * 4 + 128;

// kNK: b is [N, K]; its rows n0 .. n0 + BN - 1 are read by 8-element chunks along K and written
// transposed into the same [WK x BN] tile (element by element: not the tuned path).
template <typename T, bool kNK = false>
__device__ __forceinline__ void load_tiles_wmma(const T* a, const T* b, uint8_t* sa, uint8_t* sb, int m0, int n0, int k0, int M, int N, int K, bool vec) {
  const uint16_t* a16 = reinterpret_cast<const uint16_t*>(a);
  const uint16_t* b16 = reinterpret_cast<const uint16_t*>(b);
  // A: BM x WK = BM * 4 chunks; B: WK x BN = WK * BN / 8 chunks; spread over all threads.
  for (int id = threadIdx.x; id < BM * (WK / 8) + WK * (BN / 8); id += THREADS) {
    const uint16_t* row;
    bool row_ok;
    int col, cols;
    uint8_t* dst;
    if (id < BM * (WK / 8)) {
      const int m = id / (WK / 8), chunk = id % (WK / 8);
      row_ok = m0 + m < M, row = a16 + size_t(row_ok ? m0 + m : 0) * K, col = k0 + chunk * 8, cols = K;
      dst = sa + (m * A_LD + chunk * 8) * 2;
    } else if constexpr (kNK) {
      const int j = id - BM * (WK / 8), n = j / (WK / 8), chunk = j % (WK / 8), gn = n0 + n;
      const uint4 v = load_chunk_checked(b16 + size_t(gn < N ? gn : 0) * K, gn < N, k0 + chunk * 8, K);
      const uint16_t* e = reinterpret_cast<const uint16_t*>(&v);
      uint16_t* col = reinterpret_cast<uint16_t*>(sb) + chunk * 8 * B_LD + n;
#pragma unroll
      for (int i = 0; i < 8; ++i) col[i * B_LD] = e[i];
      continue;
    } else {
      const int j = id - BM * (WK / 8), k = j / (BN / 8), chunk = j % (BN / 8);
      row_ok = k0 + k < K, row = b16 + size_t(row_ok ? k0 + k : 0) * N, col = n0 + chunk * 8, cols = N;
      dst = sb + (k * B_LD + chunk * 8) * 2;
    }
    uint4 v;
    if (vec) v = (row_ok && col < cols) ? *reinterpret_cast<const uint4*>(row + col) : make_uint4(0, 0, 0, 0);
    else v = load_chunk_checked(row, row_ok, col, cols);
    *reinterpret_cast<uint4*>(dst) = v;
  }
}

template <typename T, bool kNK = false, typename E>
__device__ __forceinline__ void gemm_wmma(const T* __restrict__ a, const T* __restrict__ b, const E& ep, int M, int N, int K, int m0, int n0) {
  using namespace nvcuda;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 127) & ~uintptr_t(127));
  uint8_t* sa[2] = {smem, smem + WA_BYTES};
  uint8_t* sb[2] = {smem + 2 * WA_BYTES, smem + 2 * WA_BYTES + WB_BYTES};
  float* scratch = reinterpret_cast<float*>(smem + 2 * (WA_BYTES + WB_BYTES));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int WN = BN / 4;  // 8 computing warps as 2 x 4, each 64 x WN
  const int wm = warp / 4, wn = warp % 4;
  const bool vec = vector_loads_ok(a, b, N, K);
  const int k_tiles = (K + WK - 1) / WK;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][WN / 16];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < WN / 16; ++j) wmma::fill_fragment(acc[i][j], 0.f);

  load_tiles_wmma<T, kNK>(a, b, sa[0], sb[0], m0, n0, 0, M, N, K, vec);
  __syncthreads();
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int s = kt & 1;
    // Loads of the next tile go to the other buffer, overlapping this tile's math.
    if (kt + 1 < k_tiles) load_tiles_wmma<T, kNK>(a, b, sa[s ^ 1], sb[s ^ 1], m0, n0, (kt + 1) * WK, M, N, K, vec);
    if (warp < 8) {
      const T* ta = reinterpret_cast<const T*>(sa[s]);
      const T* tb = reinterpret_cast<const T*>(sb[s]);
#pragma unroll
      for (int kk = 0; kk < WK; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(fa[i], ta + (wm * 64 + i * 16) * A_LD + kk, A_LD);
#pragma unroll
        for (int j = 0; j < WN / 16; ++j) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
          wmma::load_matrix_sync(fb, tb + kk * B_LD + wn * WN + j * 16, B_LD);
#pragma unroll
          for (int i = 0; i < 4; ++i) wmma::mma_sync(acc[i][j], fa[i], fb, acc[i][j]);
        }
      }
    }
    __syncthreads();
  }
  if (warp >= 8) return;
  // Through a per-warp 16 x 16 scratch tile, so that edge tiles can be written element by element.
  float* mine = scratch + warp * 256;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < WN / 16; ++j) {
      wmma::store_matrix_sync(mine, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int row = m0 + wm * 64 + i * 16 + e / 16, col = n0 + wn * WN + j * 16 + e % 16;
        if (row < M && col < N) store1(ep.out + size_t(row) * N + col, ep.apply(row, col, mine[e]));
      }
      __syncwarp();
    }
}


// The persistent kernels' body on other archs: the same tile pairs, one tile after another.
constexpr int PERSISTENT_SMEM_BYTES = SMEM_BYTES;

template <typename T, bool kNK, typename E>
__device__ __forceinline__ void gemm_wmma_persistent(const T* __restrict__ a, const T* __restrict__ b, const E& ep, int M, int N, int K) {
  const int n_tiles = N / BN, pairs = n_tiles * (M / (2 * BM));
  for (int ct = blockIdx.x; ct < pairs; ct += gridDim.x) {
    gemm_wmma<T, kNK>(a, b, ep, M, N, K, ((ct / n_tiles) * 2 + int(blockIdx.y)) * BM, (ct % n_tiles) * BN);
    __syncthreads();  // the next tile's loads reuse the shared memory this one's epilogue read
  }
}

}  // namespace gemm
#endif

// Compile-time cluster dims: a plain launch (IREE's cuLaunchKernel) then starts clusters.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) && GEMM_CLUSTER > 1
#define GEMM_CLUSTER_DIMS __cluster_dims__(1, GEMM_CLUSTER, 1)
#else
#define GEMM_CLUSTER_DIMS
#endif

template <typename T, typename E>
__device__ __forceinline__ void gemm_body(const T* a, const T* b, const E& ep, int M, int N, int K) {
  // A launch with less dynamic shared memory than the tiles need (a spec out of step with this
  // file) would corrupt memory silently: fail the launch instead.
  uint32_t dynamic_smem;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_smem));
  if (dynamic_smem < uint32_t(gemm::SMEM_BYTES)) __trap();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  gemm::gemm_sm90<T>(a, b, ep, M, N, K);
#else
  gemm::gemm_wmma<T>(a, b, ep, M, N, K, blockIdx.y * gemm::BM, blockIdx.x * gemm::BN);
#endif
}

// a: [M, K], b: [K, N], all row-major; outputs [M, N]. Block 384, grid (ceildiv(N, 256),
// 2 * ceildiv(M, 256)), dynamic shared memory gemm::SMEM_BYTES (kernels/gemm.toml).

// c = a @ b
extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_bf16(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, float* __restrict__ c, int M, int N, int K) {
  gemm_body(a, b, gemm::PlainF32{c}, M, N, K);
}

extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_f16(const __half* __restrict__ a, const __half* __restrict__ b, float* __restrict__ c, int M, int N, int K) {
  gemm_body(a, b, gemm::PlainF32{c}, M, N, K);
}

// h = bf16(gelu_tanh(a @ b + bias)): a transformer MLP's first matmul with its bias, activation and
// the cast for the next bf16 matmul, in one pass (bias: [N] f32).
extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_bias_gelu_bf16(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, const float* __restrict__ bias,
                    __nv_bfloat16* __restrict__ h, int M, int N, int K) {
  gemm_body(a, b, gemm::BiasGeluBf16{bias, h}, M, N, K);
}

// h = bf16(gelu_erf(a @ b + bias)): the same with GELU's exact form, 0.5 x (1 + erf(x / sqrt(2)))
// (BERT's intermediate layer; bias: [N] f32).
extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_bias_gelu_erf_bf16(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, const float* __restrict__ bias,
                        __nv_bfloat16* __restrict__ h, int M, int N, int K) {
  gemm_body(a, b, gemm::BiasGeluErfBf16{bias, h}, M, N, K);
}

// h = bf16(a @ b + bias): a bf16 Linear (a transformer's qkv and output projections) with its bias
// and the cast to bf16, rounded once (bias: [N] f32).
extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_bias_bf16(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, const float* __restrict__ bias,
               __nv_bfloat16* __restrict__ h, int M, int N, int K) {
  gemm_body(a, b, gemm::BiasBf16{bias, h}, M, N, K);
}

// c = (a @ b + bias) + residual: the second matmul with its bias and the residual connection
// (bias: [N] f32, residual: [M, N] f32, not aliasing c).
extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_bias_residual_f32(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, const float* __restrict__ bias,
                       const float* __restrict__ residual, float* __restrict__ c, int M, int N, int K) {
  gemm_body(a, b, gemm::BiasResidualF32{bias, residual, c, N}, M, N, K);
}

// h = bf16(float(bf16(a @ b + bias)) + float(residual)): a bf16 Linear with its bias (gemm_bias_bf16's
// h) and the residual connection after it (a transformer's attention output projection and MLP's
// second matmul), the add as a bf16 model computes it (bias: [N] f32, residual: [M, N] bf16, not
// aliasing h).
extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_bias_residual_bf16(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, const float* __restrict__ bias,
                        const __nv_bfloat16* __restrict__ residual, __nv_bfloat16* __restrict__ h, int M, int N, int K) {
  gemm_body(a, b, gemm::BiasResidualBf16<>{bias, residual, h, N}, M, N, K);
}

// c[z] = a[z] @ b[z] for each batch z = blockIdx.z: a [B, M, K], b [B, K, N], c [B, M, N], all
// row-major and contiguous (attention's scores q @ k^T and context p @ v, bf16 in, f32 out). Grid z
// = B; each batch is gemm_bf16 on its own matrices (its own tensor maps, bounds and edges), so a
// tile never reads or writes another batch's rows or columns.
extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_batched_bf16(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, float* __restrict__ c, int M, int N, int K) {
  const size_t z = blockIdx.z;
  gemm_body(a + z * M * K, b + z * K * N, gemm::BatchedF32{{c + z * M * N}}, M, N, K);
}

// The persistent kernels (kernels/gemm.toml): the bf16-output Linears above, for M and N
// multiples of 256 (the spec's `requires`; any K, by TMA where K % 8 == 0). Block 384, grid (min(pairs, 66), 2) with
// pairs = (N / 256) (M / 256): at most one CTA per SM of an H100 (132), each taking tile pairs
// in turn; dynamic shared memory gemm::PERSISTENT_SMEM_BYTES of the arch. Not built with
// clusters of 4 (a benchmark option): their grid is 2 CTAs high.
#if GEMM_CLUSTER <= 2
// kNK: b is [N, K] (the gemm_nt_*_persistent kernels).
template <bool kNK = false, typename T, typename E>
__device__ __forceinline__ void persistent_body(const T* a, const T* b, const E& ep, int M, int N, int K) {
  uint32_t dynamic_smem;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_smem));
  if (dynamic_smem < uint32_t(gemm::PERSISTENT_SMEM_BYTES) || gridDim.y != 2 || M % (2 * gemm::BM) != 0 || N % gemm::BN != 0) __trap();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  gemm::gemm_sm90_persistent<T, kNK>(a, b, ep, M, N, K);
#else
  gemm::gemm_wmma_persistent<T, kNK>(a, b, ep, M, N, K);
#endif
}

extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_bias_bf16_persistent(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, const float* __restrict__ bias,
                          __nv_bfloat16* __restrict__ h, int M, int N, int K) {
  persistent_body(a, b, gemm::BiasBf16{bias, h}, M, N, K);
}

extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_bias_gelu_bf16_persistent(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, const float* __restrict__ bias,
                               __nv_bfloat16* __restrict__ h, int M, int N, int K) {
  persistent_body(a, b, gemm::BiasGeluBf16{bias, h}, M, N, K);
}

// h = bf16(float(bf16(a @ b + bias)) + float(residual)): gemm_bias_residual_bf16's bits.
extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_bias_residual_bf16_persistent(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, const float* __restrict__ bias,
                                   const __nv_bfloat16* __restrict__ residual, __nv_bfloat16* __restrict__ h, int M, int N, int K) {
  persistent_body(a, b, gemm::BiasResidualBf16<>{bias, residual, h, N}, M, N, K);
}

extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_bias_gelu_erf_bf16_persistent(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, const float* __restrict__ bias,
                                   __nv_bfloat16* __restrict__ h, int M, int N, int K) {
  persistent_body(a, b, gemm::BiasGeluErfBf16{bias, h}, M, N, K);
}

// The same four with b [N, K] as a Linear stores its weight (read K-major: no transpose in the
// model) and the Linear's bias in bf16 (widened to f32 where it is added: the bits of the kernels
// above given that bias in f32 and b transposed); and a Linear without bias, h = bf16(a @ b^T)
// (gemm_bf16's sums rounded once).
using bf16_t = __nv_bfloat16;
extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_nt_bf16_persistent(const bf16_t* __restrict__ a, const bf16_t* __restrict__ b, bf16_t* __restrict__ h, int M, int N, int K) {
  persistent_body<true>(a, b, gemm::PlainBf16{h}, M, N, K);
}

extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_nt_bias_bf16_persistent(const bf16_t* __restrict__ a, const bf16_t* __restrict__ b, const bf16_t* __restrict__ bias, bf16_t* __restrict__ h, int M,
                             int N, int K) {
  persistent_body<true>(a, b, gemm::BiasActBf16<NoActivation, bf16_t>{bias, h}, M, N, K);
}

extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_nt_bias_gelu_bf16_persistent(const bf16_t* __restrict__ a, const bf16_t* __restrict__ b, const bf16_t* __restrict__ bias, bf16_t* __restrict__ h,
                                  int M, int N, int K) {
  persistent_body<true>(a, b, gemm::BiasActBf16<GeluTanh, bf16_t>{bias, h}, M, N, K);
}

extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_nt_bias_gelu_erf_bf16_persistent(const bf16_t* __restrict__ a, const bf16_t* __restrict__ b, const bf16_t* __restrict__ bias,
                                      bf16_t* __restrict__ h, int M, int N, int K) {
  persistent_body<true>(a, b, gemm::BiasActBf16<GeluErf, bf16_t>{bias, h}, M, N, K);
}

extern "C" __global__ void GEMM_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_nt_bias_residual_bf16_persistent(const bf16_t* __restrict__ a, const bf16_t* __restrict__ b, const bf16_t* __restrict__ bias,
                                      const bf16_t* __restrict__ residual, bf16_t* __restrict__ h, int M, int N, int K) {
  persistent_body<true>(a, b, gemm::BiasResidualBf16<bf16_t>{bias, residual, h, N}, M, N, K);
}
#endif
