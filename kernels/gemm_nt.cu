// bf16 GEMM with the right operand as stored by a Linear's weight ("NT"), bf16 result, or that
// result widened to f32; and the same GEMM with a Linear's bf16 bias and what a transformer does
// next fused into it:
//
//     gemm_nt_bf16:                  c[M, N] = bf16(a[M, K] @ b[N, K]^T)
//     gemm_nt_bf16_f32out:           c[M, N] = f32(bf16(a[M, K] @ b[N, K]^T))
//     gemm_nt_bias_bf16:             c[M, N] = bf16(a @ b^T + bias[N])
//     gemm_nt_bias_gelu_bf16:        c[M, N] = bf16(gelu_tanh(a @ b^T + bias))   (gelu.cuh)
//     gemm_nt_bias_gelu_erf_bf16:    c[M, N] = bf16(gelu_erf(a @ b^T + bias))
//     gemm_nt_bias_residual_bf16:    c[M, N] = bf16(float(bf16(a @ b^T + bias)) + float(residual[M, N]))
//
// The bias and residual are bf16 (a bf16 model's own tensors, read as stored), added in f32; the
// bias epilogues round once, the residual one rounds gemm_nt_bias_bf16's value and then adds the
// residual as a bf16 model's add computes it (both widened, added in f32, rounded once).
//
// a [M, K] and b [N, K] row-major (b is a Linear's weight, or an LM head's tied embedding
// [vocab, hidden], read as it is: no transpose), c [M, N] row-major. Any M, N, K >= 1.
//
// Numerics: bf16 tensor cores with f32 accumulation, and one rounding of the f32 sum to bf16
// (round to nearest even) when c is stored. That is a bf16 model's matmul as IREE imports it:
// accumulated in f32, then narrowed to bf16 by the model's own truncf. gemm_nt_bf16_f32out writes
// the same bf16 values widened to f32 (exact): an LM head whose bf16 logits the model converts to
// f32 (`.float()`, an extf), without a bf16 copy of c written and read again. Both entry points are
// one body, c's element type a template parameter (the bf16 one compiles as it did alone).
//
// One launch shape for both bodies (the spec declares block and grid per kernel): 384 threads
// per block, a 1-D grid of 2 * max(min(U, 264), ceildiv(U, 8)) blocks with
// U = ceildiv(M, 256) * ceildiv(N, 256) (kernels/gemm_nt.toml). Each body derives its share of
// the work from gridDim, so the grid only sets how many tiles a block runs in turn. One body per
// architecture, chosen at compile time:
//
// - sm_90a (Hopper, __CUDA_ARCH_FEAT_SM90_ALL): warp-specialized wgmma over 128 x 256 tiles of c,
//   in clusters of 2 blocks stacked along M. Cluster g of G takes the "units" g, g + G, ... (a
//   unit is a 256 x 256 piece of c: one 128 x 256 tile per block, same columns) and its blocks
//   run through them in turn, so that a tile's stores overlap the next tile's products. Per block:
//   * warp 0 of warpgroup 0 (one thread) loads with TMA into a ring of STAGES shared-memory
//     stages (A 128 x 64 and B 256 x 64, both K-major, 128-byte swizzled: the layout wgmma reads
//     for both operands without transposes, since b's rows are K-contiguous like a's). Each block
//     loads its own A and half of B, multicast to both blocks of the cluster;
//   * warpgroups 1 and 2 each multiply a 64 x 256 half of the tile (wgmma.m64n256k16, f32
//     accumulators in registers) and, at the tile's end, write it rounded to bf16 into a staging
//     buffer in shared memory, then go on to the next tile;
//   * warps 1 to 3 of warpgroup 0 copy the staged tile to c. c's rows are only element-aligned
//     with N odd (and so are IREE's bindings), so the copy goes by 16-byte chunks aligned in c
//     (8 bf16 or 4 floats): each staged row is read shifted by its own misalignment, whole chunks
//     are 16-byte stores and the partial ones at the row's ends element stores. The staged tile
//     is bf16 for a float c too (widened on the copy), so both take the same shared memory.
//   Tensor maps: IREE passes only buffers and 32-bit constants, so the maps are built on the
//   device (tensormap.replace) by the cluster's first block and published in global memory, in
//   two 128-byte aligned slots of c inside a tile that block owns: the tile it stores last, after
//   every TMA of the cluster is done (map_home, maps_free). The cluster's second block uses the
//   same maps (they are equal for all blocks). Where TMA can't be used (K % 8 != 0, a or b not
//   16-byte aligned, or no tile of the cluster's first block has room for the maps), warpgroup 0
//   fills the same stages element by element, bounds-checked, and the consumers store from
//   their registers: correct for any shape, not tuned.
// - everything else (sm_80 ...): mma.sync m16n8k16 on 128 x 128 tiles, see namespace ampere.
//
// Epilogues (both bodies): the consumers apply the bias and activation to the f32 sums before
// their rounding (Epilogue::value); the residual is added where c is stored, to the rounded value
// (by the store warps on sm_90a, from 16-byte loads where the residual's chunk is aligned as c's is).
// Stores (both bodies): rows past M and columns past N are never written; a 4-byte bf16x2 (8-byte
// float2) or 16-byte store only where the address is aligned for it and every element is inside N.
#include <cstdint>
#include <cuda_bf16.h>

#include "gelu.cuh"
#include "mma_bf16.cuh"
#include "sm90_pipeline.cuh"

namespace gemm_nt {

using namespace mma_bf16;       // bf16, smem, ldmatrix, mma, aligned16
using namespace sm90_pipeline;  // smem_addr, mbarriers, cluster, TMA loads, load_chunk_checked

constexpr int THREADS = 384;

// c's element type Out: bf16 (gemm_nt_bf16), or float holding the bf16-rounded value
// (gemm_nt_bf16_f32out: the model's truncf and then extf, exact). Every result is rounded to bf16
// once either way; with float the rounded value is written widened.
template <typename Out>
constexpr bool kWidened = sizeof(Out) == 4;

// c[row, col] and c[row, col + 1] (when inside M and N), rounded to bf16 (and widened back for a
// float c).
template <typename Out>
__device__ __forceinline__ void store_pair(Out* c, int M, int N, int row, int col, float v0, float v1) {
  if (row >= M || col >= N) return;
  Out* p = c + static_cast<size_t>(row) * N + col;
  if constexpr (kWidened<Out>) {
    const float r0 = __bfloat162float(__float2bfloat16_rn(v0)), r1 = __bfloat162float(__float2bfloat16_rn(v1));
    if (col + 1 < N && (reinterpret_cast<uintptr_t>(p) & 7) == 0) {
      *reinterpret_cast<float2*>(p) = make_float2(r0, r1);
    } else {
      p[0] = r0;
      if (col + 1 < N) p[1] = r1;
    }
  } else if (col + 1 < N && (reinterpret_cast<uintptr_t>(p) & 3) == 0) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);  // .x (low address) = v0
  } else {
    p[0] = __float2bfloat16_rn(v0);
    if (col + 1 < N) p[1] = __float2bfloat16_rn(v1);
  }
}

// ---- Epilogues: what a tile's f32 sums become ------------------------------------------------
// value(sum, col, N): the f32 value rounded to bf16 once (col < N; 0 for columns past N, which
// are never stored). With kResidual, residual[row, col] is added to that rounded value where c
// is stored (add_residual on sm_90a's store warps, store_result elsewhere).
struct Plain {
  static constexpr bool kResidual = false;
  __device__ __forceinline__ float value(float sum, int, int) const { return sum; }
};
template <typename Act>
struct BiasAct {
  static constexpr bool kResidual = false;
  const bf16* bias;  // [N]
  __device__ __forceinline__ float value(float sum, int col, int N) const { return col < N ? Act::apply(sum + __bfloat162float(bias[col])) : 0.0f; }
};
struct BiasResidual {
  static constexpr bool kResidual = true;
  const bf16* bias;      // [N]
  const bf16* residual;  // [M, N], laid out as c, not aliasing it
  __device__ __forceinline__ float value(float sum, int col, int N) const { return col < N ? sum + __bfloat162float(bias[col]) : 0.0f; }
};

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// The consumers' own stores (the mma.sync body; the sm_90a body without TMA): sums (s0, s1) of
// c[row, col] and c[row, col + 1] through the epilogue into c.
template <typename Out, typename E>
__device__ __forceinline__ void store_result(Out* c, const E& ep, int M, int N, int row, int col, float s0, float s1) {
  if (row >= M || col >= N) return;
  float v0 = ep.value(s0, col, N), v1 = ep.value(s1, col + 1, N);
  if constexpr (E::kResidual) {
    const bf16* r = ep.residual + static_cast<size_t>(row) * N + col;
    v0 = round_bf16(v0) + __bfloat162float(r[0]);
    if (col + 1 < N) v1 = round_bf16(v1) + __bfloat162float(r[1]);
  }
  store_pair(c, M, N, row, col, v0, v1);
}

}  // namespace gemm_nt

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace gemm_nt {
namespace hopper {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 3, CLUSTER = 2;
constexpr int A_BYTES = BM * BK * 2;            // 16 KB
constexpr int B_BYTES = BN * BK * 2;            // 32 KB
constexpr int B_PART_ROWS = BN / CLUSTER;       // rows of B each block of the cluster loads
constexpr int B_PART_BYTES = B_BYTES / CLUSTER;  // 16 KB
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
// Staged tile rows: element x of a row at byte 16 + 2 x, 16-byte slots 0 .. 33 (slot 0 and 33
// are read, never written: the neighbours of a row's first and last chunk, whose elements outside
// the row are not stored). 560 bytes = 140 words: the 8 rows of one accumulator store fall in
// 8 distinct 4-bank groups.
constexpr int STG_PITCH = 560;
constexpr int STG_HALF = (BM / 2) * STG_PITCH;
// 16-byte chunks of c a staged row can touch: of 8 bf16 elements, or of 4 floats (the staged tile
// is bf16 either way: the values are bf16 already, and a float tile would not fit beside the
// stages; the copy to c widens them).
template <typename Out>
constexpr int STG_CHUNKS = BN / (16 / int(sizeof(Out))) + 1;
constexpr int STORE_THREADS = 96;  // warps 1 to 3
constexpr int FLOAT_GROUP = 4;     // chunks of a float c a store thread reads before it stores them
// + 1024: the dynamic shared memory base is only 16-byte aligned; swizzled tiles need 1024.
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + BM * STG_PITCH + 1024;  // 220160
static_assert(THREADS == 3 * 128, "warpgroup 0 loads and stores, warpgroups 1 and 2 multiply");
// (A float c's 64 x 65 chunks leave the last round of a half to one warp: 4160 = 43 x 96 + 32.)
static_assert((BM / 2) * STG_CHUNKS<bf16> % STORE_THREADS == 0, "a staged half divides among the store threads");
static_assert(STG_PITCH % 16 == 0 && STG_PITCH >= 16 * (STG_CHUNKS<bf16> + 1), "slots 0 .. STG_CHUNKS of a staged row");
static_assert(STG_PITCH >= 8 * (STG_CHUNKS<float> + 2), "a float c's chunk j reads staged bytes 8 j + 8 .. 8 j + 23");

// d[128] (+)= A(desc) * B(desc) for one m64n256k16 tile, both operands K-major (no transpose);
// scale_d 0 overwrites d (a tile's first product). Generated operand lists.
__device__ __forceinline__ void wgmma_n256(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                 "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                 "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                 "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                 "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                 "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                 "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                 "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                 "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
                 "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
                 "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                 "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
                 "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
               : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// Pins the accumulators in registers across the asynchronous wgmma (as CUTLASS's
// warpgroup_fence_operand): without it ptxas may move them and serialize the wgmmas (C7515).
__device__ __forceinline__ void fence_operands(float (&d)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// wgmma shared-memory matrix descriptor, 128-byte swizzle (PTX ISA, "Matrix Descriptor Format"):
// start address, leading byte offset (unused for swizzled K-major operands; 1 by convention) and
// stride byte offset (1024: the distance between 8-row swizzle atoms), in 16-byte units; swizzle
// mode 1 in bits 62-63.
__device__ __forceinline__ uint64_t make_desc(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// Swizzled tile layout (TMA's CU_TENSOR_MAP_SWIZZLE_128B, wgmma's 128-byte swizzle): row r of
// 64 elements at r * 128 bytes, its 16-byte chunk c at chunk c ^ (r % 8), from a 1024-aligned base.
__device__ __forceinline__ uint32_t tile_offset(int r, int chunk) { return r * 128 + ((chunk ^ (r & 7)) << 4); }

// mbar_wait with acquire at cluster scope: for maps_free, whose arrivals come from the peer block.
__device__ __forceinline__ void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Once per block (maps_free): orders this block's observation of its last loads before the
// first block overwrites the maps.
__device__ __forceinline__ void mbar_arrive_remote_release_cluster(uint32_t cluster_bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_bar) : "memory");
}

// Where the tensor maps live in global memory (TMA reads maps from there only, and IREE gives the
// kernel no scratch buffer): two 128-byte aligned slots of c inside the tile (m0, n0), which no
// other block writes and its own block writes last. With N odd, c's rows start at every even
// byte offset, so a row's part of a narrow tile may hold no aligned slot while the next row's
// does: the rows are searched in turn. A tile that spans whole rows (n0 == 0, N <= BN) owns the
// contiguous bytes of its rows, and the slots may lie anywhere in them. Null (a) where there is
// no room for both.
struct MapHome {
  uint8_t* a;
  uint8_t* b;
};
template <typename Out>
__device__ __forceinline__ MapHome map_home(Out* c, int M, int N, int m0, int n0) {
  MapHome home{nullptr, nullptr};
  if (m0 >= M) return home;
  const int rows = min(BM, M - m0);
  if (n0 == 0 && N <= BN) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(c + size_t(m0) * N), end = reinterpret_cast<uintptr_t>(c + size_t(m0 + rows) * N);
    const uintptr_t slot = (begin + 127) & ~uintptr_t(127);
    if (slot + 256 <= end) home = {reinterpret_cast<uint8_t*>(slot), reinterpret_cast<uint8_t*>(slot + 128)};
    return home;
  }
  const int cols = min(BN, N - n0);
  for (int r = 0; r < rows && home.b == nullptr; ++r) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(c + size_t(m0 + r) * N + n0), end = begin + sizeof(Out) * uintptr_t(cols);
    for (uintptr_t slot = (begin + 127) & ~uintptr_t(127); slot + 128 <= end && home.b == nullptr; slot += 128) {
      if (home.a == nullptr) home.a = reinterpret_cast<uint8_t*>(slot);
      else home.b = reinterpret_cast<uint8_t*>(slot);
    }
  }
  if (home.b == nullptr) home.a = nullptr;
  return home;
}

// Warp 0 of the cluster's first block: A's map and B's into home.a and home.b, released at
// cluster scope (both blocks of the cluster load through them, after the cluster barrier).
__device__ __forceinline__ void build_tensor_maps(uint64_t (&staging)[2][16], const MapHome& home, const bf16* a, const bf16* b, int M, int N, int K) {
  const int lane = threadIdx.x % 32;
  (&staging[0][0])[lane] = 0;
  __syncwarp();
  if (lane == 0) {
    encode_tensor_map<bf16>(smem_addr(staging[0]), a, M, K, uint64_t(K) * 2, 128);  // 128 x 64 boxes
    encode_tensor_map<bf16>(smem_addr(staging[1]), b, N, K, uint64_t(K) * 2, 128);
  }
  __syncwarp();
  asm volatile("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.cluster.sync.aligned [%0], [%1], 128;\n" ::"l"(home.a),
               "r"(smem_addr(staging[0]))
               : "memory");
  asm volatile("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.cluster.sync.aligned [%0], [%1], 128;\n" ::"l"(home.b),
               "r"(smem_addr(staging[1]))
               : "memory");
}

// The 16 bytes of c's chunk j of a staged row (row_base: its shared address; e: the row's part of
// the tile starts e elements into a 16-byte chunk of c) into o, low address first: elements
// x0 = 8 j - e .. x0 + 7 as bf16 pairs, or x0 = 4 j - e .. x0 + 3 widened to floats (a bf16's
// float has the same high 16 bits, and zeros below). Staged element x lies at byte 16 + 2 x.
template <typename Out>
__device__ __forceinline__ void staged_chunk(uint32_t row_base, int j, int e, uint32_t (&o)[4]) {
  if constexpr (kWidened<Out>) {
    // Bytes 8 j + 8 .. 8 j + 23 (8-byte aligned) hold elements 4 j - 4 .. 4 j + 3; x0 is their
    // element 4 - e.
    uint32_t w[5];
    const uint32_t src = row_base + 8 * j + 8;
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(w[0]), "=r"(w[1]) : "r"(src) : "memory");
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(w[2]), "=r"(w[3]) : "r"(src + 8) : "memory");
    w[4] = 0;
    const int first = 4 - e, words = first >> 1;  // words 0 .. 2
#pragma unroll
    for (int k = 0; k < 3; ++k) w[k] = (words & 2) ? w[k + 2] : w[k];
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] = (words & 1) ? w[k + 1] : w[k];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const uint32_t pair = (first & 1) ? __funnelshift_r(w[k], w[k + 1], 16) : w[k];
      o[2 * k] = pair << 16;
      o[2 * k + 1] = pair & 0xFFFF0000u;
    }
  } else {
    // Staged slots j and j + 1 hold elements 8 j - 8 .. 8 j + 7; x0 is element 8 - e of them.
    uint32_t w[9];
    const uint32_t src = row_base + 16 * j;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "r"(src) : "memory");
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(w[4]), "=r"(w[5]), "=r"(w[6]), "=r"(w[7]) : "r"(src + 16) : "memory");
    w[8] = 0;
    const int first = 8 - e, words = first >> 1;  // words 0 .. 4
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] = (words & 4) ? w[k + 4] : w[k];
#pragma unroll
    for (int k = 0; k < 6; ++k) w[k] = (words & 2) ? w[k + 2] : w[k];
#pragma unroll
    for (int k = 0; k < 8; ++k) w[k] = (words & 1) ? w[k + 1] : w[k];
#pragma unroll
    for (int k = 0; k < 4; ++k) o[k] = (first & 1) ? __funnelshift_r(w[k], w[k + 1], 16) : w[k];
  }
}

// o (c's chunk: the 8 bf16 elements x0 .. x0 + 7 of a row's part of the tile, as pairs) plus the
// residual's same elements (r: the residual's row part, laid out as c's), each bf16(float(o) +
// float(r)); elements outside [0, cols) are not stored and not read. One 16-byte load where the
// chunk is whole and the residual's is aligned (as c's is, unless the two are offset differently).
__device__ __forceinline__ void add_residual(uint32_t (&o)[4], const bf16* r, int x0, int cols) {
  uint32_t w[4];
  if (x0 >= 0 && x0 + 8 <= cols && aligned16(r + x0)) {
    asm volatile("ld.global.nc.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(r + x0));
  } else {
    const uint16_t* r16 = reinterpret_cast<const uint16_t*>(r);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int x = x0 + 2 * k;
      const uint32_t lo = x >= 0 && x < cols ? r16[x] : 0u, hi = x + 1 >= 0 && x + 1 < cols ? r16[x + 1] : 0u;
      w[k] = lo | (hi << 16);
    }
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    // A bf16's float: its 16 bits above 16 zero bits.
    const float o_lo = __uint_as_float(o[k] << 16), o_hi = __uint_as_float(o[k] & 0xFFFF0000u);
    const float r_lo = __uint_as_float(w[k] << 16), r_hi = __uint_as_float(w[k] & 0xFFFF0000u);
    const __nv_bfloat162 v = __floats2bfloat162_rn(o_lo + r_lo, o_hi + r_hi);  // .x (low address) = the lower element
    o[k] = *reinterpret_cast<const uint32_t*>(&v);
  }
}

// The work of a cluster: units first, first + stride, ... (count of them), unit u being rows
// [256 (u % pairs_m), + 256) and columns [256 (u / pairs_m), + 256) of c; the block of rank r
// takes the unit's rows 128 r .. 128 r + 127. Strided, so that the clusters running at once work
// on consecutive units (sharing B tiles and all of a in L2), and a cluster's units lie in
// different columns of c (one of them is wide enough for the maps even where N leaves a narrow
// last column of tiles). Step i of the run takes the cluster's unit (last + 1 + i) % count: the
// unit `last` comes last (the one holding the maps).
struct Work {
  long long first, stride;
  int count, last, pairs_m;
  __device__ __forceinline__ void tile(int i, uint32_t rank, int& m0, int& n0) const {
    int j = last + 1 + i;
    if (j >= count) j -= count;
    const long long u = first + j * stride;
    m0 = int((u % pairs_m) * CLUSTER + rank) * BM;
    n0 = int(u / pairs_m) * BN;
  }
};

template <typename Out, typename E>
__device__ __forceinline__ void run(const bf16* __restrict__ a, const bf16* __restrict__ b, Out* __restrict__ c, const E& ep, int M, int N, int K,
                                    uint8_t* smem_raw) {
  static_assert(!E::kResidual || !kWidened<Out>, "the residual is added to a bf16 c");
  __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES], staged[2], drained[2], maps_free;
  __shared__ __align__(128) uint64_t map_staging[2][16];
  // Same offset in every block: multicast copies land at the address each block reads.
  const uint32_t smem = (smem_addr(smem_raw) + 1023) & ~1023u;
  const uint32_t stg = smem + STAGES * STAGE_BYTES;
  const int warpgroup = threadIdx.x / 128, t = threadIdx.x % 128;
  const uint32_t rank = cluster_rank();
  const int k_tiles = (K + BK - 1) / BK;

  Work work;
  work.pairs_m = (M + CLUSTER * BM - 1) / (CLUSTER * BM);
  {
    const long long units = (long long)work.pairs_m * ((N + BN - 1) / BN);
    work.first = blockIdx.x / CLUSTER;
    work.stride = gridDim.x / CLUSTER;
    work.count = units > work.first ? int((units - work.first + work.stride - 1) / work.stride) : 0;
    work.last = work.count - 1;
  }
  // TMA (for both blocks of the cluster: they fill each other's B tiles) where a and b allow it
  // and a tile of the first block has room for the maps; that tile's unit goes last.
  bool tma = false;
  MapHome home{nullptr, nullptr};
  if ((K & 7) == 0 && aligned16(a) && aligned16(b)) {
    work.last = 0;
    for (int i = 0; i < work.count && !tma; ++i) {
      const long long u = work.first + i * work.stride;
      home = map_home(c, M, N, int(u % work.pairs_m) * CLUSTER * BM, int(u / work.pairs_m) * BN);
      tma = home.a != nullptr;
      if (tma) work.last = i;
    }
    if (!tma) work.last = work.count - 1;
  }

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(smem_addr(&full[s]), tma ? 1 : 128);               // the TMA thread, or all loaders
      mbar_init(smem_addr(&empty[s]), tma ? 8 * CLUSTER : 8);       // consumer warps of the cluster, or own
    }
    for (int h = 0; h < 2; ++h) {
      mbar_init(smem_addr(&staged[h]), 128);            // the consumer warpgroup of that half
      mbar_init(smem_addr(&drained[h]), STORE_THREADS);  // the store threads
    }
    mbar_init(smem_addr(&maps_free), 8 * CLUSTER);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if (tma && rank == 0 && threadIdx.x < 32) build_tensor_maps(map_staging, home, a, b, M, N, K);
  cluster_sync();  // the peers' barriers and the maps exist before anyone uses them

  if (work.count == 0) {
    // Nothing to do; waits for the cluster below.
  } else if (warpgroup == 0) {
    // Registers move from warpgroup 0 to the consumers (needs __launch_bounds__(384, 1)):
    // 128 x 88 + 256 x 208 = 384 x 168, all the block was given.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 88;\n");
    if (tma && t == 0) {
      const void *map_a = home.a, *map_b = home.b;
      asm volatile("fence.proxy.tensormap::generic.acquire.cluster [%0], 128;\n" ::"l"(map_a) : "memory");
      asm volatile("fence.proxy.tensormap::generic.acquire.cluster [%0], 128;\n" ::"l"(map_b) : "memory");
      for (int i = 0; i < work.count; ++i) {
        int m0, n0;
        work.tile(i, rank, m0, n0);
        // Boxes wholly past M or N are not loaded: the stale bytes left in their place reach
        // only accumulators of rows past M or columns past N, which are never stored. Both
        // blocks count the same B parts (same n0).
        const bool a_in = m0 < M;
        int b_parts = 0;
        for (int r = 0; r < CLUSTER; ++r) b_parts += n0 + r * B_PART_ROWS < N;
        const bool b_in = n0 + int(rank) * B_PART_ROWS < N;
        const uint32_t tx = (a_in ? A_BYTES : 0) + b_parts * B_PART_BYTES;
        for (int kt = 0; kt < k_tiles; ++kt) {
          const int g = i * k_tiles + kt, s = g % STAGES;
          if (g >= STAGES) mbar_wait(smem_addr(&empty[s]), ((g / STAGES) - 1) & 1);
          const uint32_t sa = smem + s * STAGE_BYTES, sb = sa + A_BYTES, bar = smem_addr(&full[s]);
          mbar_arrive_expect_tx(bar, tx);  // own A, and B's parts from the cluster
          if (a_in) tma_load(sa, map_a, kt * BK, m0, bar);
          if (b_in) tma_load_multicast(sb + rank * B_PART_BYTES, map_b, kt * BK, n0 + int(rank) * B_PART_ROWS, bar, (1u << CLUSTER) - 1);
        }
      }
    } else if (tma && t >= 32) {
      // Store threads: staged halves to c, by 16-byte chunks aligned in c.
      const int st = t - 32;
      for (int i = 0; i < work.count; ++i) {
        int m0, n0;
        work.tile(i, rank, m0, n0);
        // The last tile of the first block holds the maps: both blocks' loads must be done.
        if (rank == 0 && i == work.count - 1) mbar_wait_cluster(smem_addr(&maps_free), 0);
        const int cols = min(BN, N - n0);
        for (int h = 0; h < 2; ++h) {
          mbar_wait(smem_addr(&staged[h]), i & 1);
          if constexpr (kWidened<Out>) {
            // A float c has twice the chunks of a bf16 one: a thread reads FLOAT_GROUP of them from
            // shared memory together, then stores them, so that the reads' latency is paid once
            // per group (GPT-2's LM head: 18% faster than one chunk at a time; docs/gemm.md).
            static_assert(!E::kResidual, "no float c has a residual epilogue");
            constexpr int PER = 4, CHUNKS = (BM / 2) * STG_CHUNKS<Out>;
            for (int first = st; first < CHUNKS; first += FLOAT_GROUP * STORE_THREADS) {
              uint32_t o[FLOAT_GROUP][4];
              Out* p[FLOAT_GROUP];
              int x0[FLOAT_GROUP];
              bool live[FLOAT_GROUP];
#pragma unroll
              for (int u = 0; u < FLOAT_GROUP; ++u) {
                const int id = first + u * STORE_THREADS;
                const int r = id / STG_CHUNKS<Out>, j = id % STG_CHUNKS<Out>, row = m0 + h * (BM / 2) + r;
                p[u] = c + size_t(row) * N + n0;
                const int e = int(reinterpret_cast<uintptr_t>(p[u]) / sizeof(Out)) & (PER - 1);
                x0[u] = PER * j - e;
                live[u] = id < CHUNKS && row < M && x0[u] + PER > 0 && x0[u] < cols;
                if (live[u]) staged_chunk<Out>(stg + h * STG_HALF + r * STG_PITCH, j, e, o[u]);
              }
#pragma unroll
              for (int u = 0; u < FLOAT_GROUP; ++u) {
                if (!live[u]) continue;
                if (x0[u] >= 0 && x0[u] + PER <= cols) {
                  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p[u] + x0[u]), "r"(o[u][0]), "r"(o[u][1]), "r"(o[u][2]), "r"(o[u][3]) : "memory");
                } else {
                  uint32_t* q = reinterpret_cast<uint32_t*>(p[u]);
#pragma unroll
                  for (int k = 0; k < 4; ++k)
                    if (x0[u] + k >= 0 && x0[u] + k < cols) q[x0[u] + k] = o[u][k];
                }
              }
            }
          } else {  // bf16 c: one chunk at a time
            for (int id = st; id < (BM / 2) * STG_CHUNKS<Out>; id += STORE_THREADS) {
              const int r = id / STG_CHUNKS<Out>, j = id % STG_CHUNKS<Out>, row = m0 + h * (BM / 2) + r;
              if (row >= M) continue;
              Out* p = c + size_t(row) * N + n0;
              // Chunk j of the row: c's 16-byte aligned chunk holding elements x0 .. x0 + PER - 1 of
              // the row's part of the tile (x0 < 0 where the part starts mid-chunk).
              constexpr int PER = 16 / int(sizeof(Out));
              const int e = int(reinterpret_cast<uintptr_t>(p) / sizeof(Out)) & (PER - 1), x0 = PER * j - e;
              if (x0 + PER <= 0 || x0 >= cols) continue;
              uint32_t o[4];
              staged_chunk<Out>(stg + h * STG_HALF + r * STG_PITCH, j, e, o);
              if constexpr (E::kResidual) add_residual(o, ep.residual + size_t(row) * N + n0, x0, cols);
              if (x0 >= 0 && x0 + PER <= cols) {
                asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p + x0), "r"(o[0]), "r"(o[1]), "r"(o[2]), "r"(o[3]) : "memory");
              } else {
                uint16_t* q = reinterpret_cast<uint16_t*>(p);
#pragma unroll
                for (int k = 0; k < 8; ++k)
                  if (x0 + k >= 0 && x0 + k < cols) q[x0 + k] = uint16_t(o[k / 2] >> (16 * (k % 2)));
              }
            }
          }
          mbar_arrive(smem_addr(&drained[h]));
        }
      }
    } else if (!tma) {
      // Element by element, bounds-checked, by all of warpgroup 0: each block loads its whole
      // A and B tiles itself.
      const uint16_t* a16 = reinterpret_cast<const uint16_t*>(a);
      const uint16_t* b16 = reinterpret_cast<const uint16_t*>(b);
      for (int i = 0; i < work.count; ++i) {
        int m0, n0;
        work.tile(i, rank, m0, n0);
        for (int kt = 0; kt < k_tiles; ++kt) {
          const int g = i * k_tiles + kt, s = g % STAGES, k0 = kt * BK;
          if (g >= STAGES) mbar_wait(smem_addr(&empty[s]), ((g / STAGES) - 1) & 1);
          const uint32_t sa = smem + s * STAGE_BYTES, sb = sa + A_BYTES;
          for (int id = t; id < BM * (BK / 8); id += 128) {
            const int r = id / (BK / 8), chunk = id % (BK / 8), gm = m0 + r;
            const uint4 v = load_chunk_checked(a16 + size_t(gm < M ? gm : 0) * K, gm < M, k0 + chunk * 8, K);
            asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(sa + tile_offset(r, chunk)), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
          }
          for (int id = t; id < BN * (BK / 8); id += 128) {
            const int r = id / (BK / 8), chunk = id % (BK / 8), gn = n0 + r;
            const uint4 v = load_chunk_checked(b16 + size_t(gn < N ? gn : 0) * K, gn < N, k0 + chunk * 8, K);
            asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(sb + tile_offset(r, chunk)), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
          }
          // Written through the generic proxy; wgmma reads through the async proxy.
          asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
          mbar_arrive(smem_addr(&full[s]));
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 208;\n");
    const int half = warpgroup - 1;  // rows [64 half, 64 half + 64) of the tile
    const int warp = t / 32, lane = t % 32;
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;
    for (int i = 0; i < work.count; ++i) {
      int m0, n0;
      work.tile(i, rank, m0, n0);
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int g = i * k_tiles + kt, s = g % STAGES;
        mbar_wait(smem_addr(&full[s]), (g / STAGES) & 1);
        const uint32_t sa = smem + s * STAGE_BYTES + half * (BM / 2) * 128, sb = smem + s * STAGE_BYTES + A_BYTES;
        fence_operands(d);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int ks = 0; ks < BK / 16; ++ks) {
          // K step of 16: 32 bytes along the swizzled rows of both operands. The tile's first
          // product overwrites the previous tile's accumulators (scale-d 0).
          wgmma_n256(d, make_desc(sa + ks * 32), make_desc(sb + ks * 32), kt > 0 || ks > 0);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        // Wait for this stage's products before releasing it; the tensor cores stay busy
        // meanwhile with the other consumer warpgroup's wgmmas.
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        fence_operands(d);
        if (lane == 0) {
          if (tma) {
            for (int r = 0; r < CLUSTER; ++r) mbar_arrive_remote(peer_addr(smem_addr(&empty[s]), r));
          } else {
            mbar_arrive(smem_addr(&empty[s]));
          }
        }
      }
      // Accumulator layout of m64nNk16 (PTX ISA, "wgmma D fragments"): register i of thread
      // (warp w, lane l) holds row 16 w + l / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (l % 4) + i % 2.
      if (tma) {
        // Every load of the cluster into this block has landed: its TMAs have read the maps.
        if (i == work.count - 1 && lane == 0) mbar_arrive_remote_release_cluster(peer_addr(smem_addr(&maps_free), 0));
        if (i > 0) mbar_wait(smem_addr(&drained[half]), (i - 1) & 1);  // the store threads are done with the last tile
        const uint32_t base = stg + half * STG_HALF + 16;
#pragma unroll
        for (int k = 0; k < 128; k += 2) {
          const int r = warp * 16 + lane / 4 + 8 * ((k / 2) % 2), col = 8 * (k / 4) + 2 * (lane % 4);
          // .x (low address) = column col
          const __nv_bfloat162 v = __floats2bfloat162_rn(ep.value(d[k], n0 + col, N), ep.value(d[k + 1], n0 + col + 1, N));
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(base + r * STG_PITCH + col * 2), "r"(*reinterpret_cast<const uint32_t*>(&v)) : "memory");
        }
        mbar_arrive(smem_addr(&staged[half]));
      } else {
#pragma unroll
        for (int k = 0; k < 128; k += 2) {
          const int row = m0 + half * (BM / 2) + warp * 16 + lane / 4 + 8 * ((k / 2) % 2), col = n0 + 8 * (k / 4) + 2 * (lane % 4);
          store_result(c, ep, M, N, row, col, d[k], d[k + 1]);
        }
      }
    }
  }
  // No block leaves while a peer may still copy into its shared memory or arrive on its barriers.
  cluster_sync();
}

}  // namespace hopper
constexpr int SMEM_BYTES = hopper::SMEM_BYTES;
}  // namespace gemm_nt
#else  // not sm_90a: mma.sync
namespace gemm_nt {
// The mma.sync body (sm_80 and its PTX on every newer GPU): 128 x 128 tiles of c, taken in turn
// by the blocks of the grid (tile blockIdx.x, + gridDim.x, ...; M fastest, so that the blocks
// running at once share tiles of b and run through a). Warps 0-7 load and multiply; warps 8-11
// exist for the sm_90a body's block size and only take part in the barriers.
//
// The 8 warps form a 2 x 4 grid, each owning 64 x 32 of the tile (4 x 4 m16n8k16 tiles, 64 f32
// accumulators per thread). K goes in steps of 32: the block stages the 128 x 32 tiles of a and b
// in shared memory (rows padded to 40 elements, 80 bytes: 16-byte aligned, ldmatrix without bank
// conflicts), double buffered: the next step's tiles are loaded (cp.async) while the current ones
// are multiplied. Both tiles are K-contiguous, so ldmatrix without .trans gives the A fragments of
// a and the column-major B fragments of b alike.
//
// Loads: 16-byte cp.async where a (resp. b) is 16-byte aligned and K is a multiple of 8 (every
// row start is then aligned, and an 8-element chunk is wholly inside K or wholly outside);
// chunks past M, N or K are zero-filled (src-size 0). Otherwise (IREE bindings are only
// element-aligned; K odd) element by element, zeros outside. Zeros add nothing to the sums.
// Stores: the accumulator layout gives each thread pairs of adjacent columns of one row; a pair
// is stored as one 4-byte bf16x2 when both columns are inside N and its address is 4-byte
// aligned (with N odd, every other row's pairs are not), else element by element.
namespace ampere {

constexpr int BM = 128;
constexpr int BN = 128;
constexpr int BK = 32;
constexpr int PITCH = 40;       // shared-memory row pitch in elements (80 bytes)
constexpr int LOADERS = 256;    // warps 0-7
constexpr int TILE_ELEMS = BM * PITCH;
constexpr int SMEM_BYTES = 4 * TILE_ELEMS * 2;  // two stages of the a and b tiles: 40960
static_assert(LOADERS == 256 && LOADERS < THREADS, "two 16-byte chunks of each 128 x 32 tile per loading thread");

// 16 bytes from global to shared, or 16 zero bytes when !valid (src-size 0: nothing is read).
__device__ __forceinline__ void cp_async16(bf16* dst, const bf16* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// tile[r][c] = src[(r0 + r) * K + k0 + c] for r0 + r < rows, k0 + c < K; 0 elsewhere.
// 128 x 32 elements: 512 chunks of 8, two per loading thread.
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* src, int r0, int rows, int k0, int K, bool vec) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int i = threadIdx.x + j * LOADERS;
    const int r = i >> 2, c = (i & 3) * 8;
    bf16* dst = tile + r * PITCH + c;
    const bool row_in = r0 + r < rows;
    const size_t off = static_cast<size_t>(r0 + r) * K + k0 + c;
    if (vec) {  // K % 8 == 0: the chunk is wholly inside K or outside
      const bool in = row_in && k0 + c < K;
      cp_async16(dst, in ? src + off : src, in);
    } else {
      const bf16 zero = __float2bfloat16(0.0f);
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = (row_in && k0 + c + e < K) ? src[off + e] : zero;
    }
  }
}

template <typename Out, typename E>
__device__ __forceinline__ void run(const bf16* __restrict__ a, const bf16* __restrict__ b, Out* __restrict__ c, const E& ep, int M, int N, int K,
                                    uint8_t* smem_raw) {
  // Stage s: a's tile at sA + s * TILE_ELEMS, b's at sB + s * TILE_ELEMS.
  bf16* const sA = reinterpret_cast<bf16*>(smem_raw);
  bf16* const sB = sA + 2 * TILE_ELEMS;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool worker = warp < 8;  // uniform per warp
  const int wm = (warp & 1) * 64, wn = ((warp >> 1) & 3) * 32;  // this warp's 64 x 32 of the tile
  const int g = lane >> 2, q = lane & 3;
  const bool vec_a = aligned16(a) && (K & 7) == 0;
  const bool vec_b = aligned16(b) && (K & 7) == 0;
  const int tiles_m = (M + BM - 1) / BM;
  const long long tiles = (long long)tiles_m * ((N + BN - 1) / BN);
  const int k_tiles = (K + BK - 1) / BK;

  // ldmatrix row addresses of this lane. A (x4): matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7),
  // (rows 0-7, k 8-15), (rows 8-15, k 8-15) = a0..a3 of m16n8k16. B (x4) over 16 columns of c:
  // matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) = b0, b1 of the
  // first n8 tile, then of the second.
  const int a_row = wm + (lane & 15), a_col = (lane >> 4) * 8;
  const int b_row = wn + ((lane >> 4) << 3) + (lane & 7), b_col = ((lane >> 3) & 1) * 8;

  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int m0 = int(tile % tiles_m) * BM, n0 = int(tile / tiles_m) * BN;
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

    // Stage 0 was last read before the previous tile's closing barrier.
    if (worker) {
      load_tile(sA, a, m0, M, 0, K, vec_a);
      load_tile(sB, b, n0, N, 0, K, vec_b);
      cp_async_commit();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = kt & 1;
      if (worker) {
        if (kt + 1 < k_tiles) {  // the other stage was last read in step kt - 1, before its closing barrier
          load_tile(sA + (s ^ 1) * TILE_ELEMS, a, m0, M, (kt + 1) * BK, K, vec_a);
          load_tile(sB + (s ^ 1) * TILE_ELEMS, b, n0, N, (kt + 1) * BK, K, vec_b);
          cp_async_commit();
          cp_async_wait<1>();  // this step's group has landed, the next one may still be in flight
        } else {
          cp_async_wait<0>();
        }
      }
      __syncthreads();
      if (worker) {
        const bf16* tA = sA + s * TILE_ELEMS;
        const bf16* tB = sB + s * TILE_ELEMS;
#pragma unroll
        for (int ks = 0; ks < BK; ks += 16) {
          unsigned af[4][4], bfr[2][4];
#pragma unroll
          for (int i = 0; i < 4; ++i) ldsm_x4(af[i], tA + (a_row + i * 16) * PITCH + ks + a_col);
#pragma unroll
          for (int j = 0; j < 2; ++j) ldsm_x4(bfr[j], tB + (b_row + j * 16) * PITCH + ks + b_col);
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) mma(acc[i][j], af[i], bfr[j >> 1][(j & 1) * 2], bfr[j >> 1][(j & 1) * 2 + 1]);
        }
      }
      __syncthreads();  // every warp is done with stage s before step kt + 1 loads into it
    }

    // Accumulator (i, j): rows m0 + wm + 16 i + g (elements 0, 1) and + 8 (2, 3), columns
    // n0 + wn + 8 j + 2 q and + 1.
    if (worker) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = m0 + wm + i * 16 + g;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int col = n0 + wn + j * 8 + 2 * q;
          store_result(c, ep, M, N, row, col, acc[i][j][0], acc[i][j][1]);
          store_result(c, ep, M, N, row + 8, col, acc[i][j][2], acc[i][j][3]);
        }
      }
    }
  }
}

}  // namespace ampere
constexpr int SMEM_BYTES = ampere::SMEM_BYTES;
}  // namespace gemm_nt
#endif

// Compile-time cluster dims: a plain launch (IREE's cuLaunchKernel) then starts clusters.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GEMM_NT_CLUSTER_DIMS __cluster_dims__(2, 1, 1)
#else
#define GEMM_NT_CLUSTER_DIMS
#endif

namespace gemm_nt {
// The body of every entry point, c of element type Out (bf16, or float for the widened result),
// the sums through the epilogue E.
template <typename Out, typename E = Plain>
__device__ __forceinline__ void gemm(const bf16* __restrict__ a, const bf16* __restrict__ b, Out* __restrict__ c, int M, int N, int K, const E& ep = E{}) {
  extern __shared__ __align__(16) uint8_t gemm_nt_smem[];
  // A launch with less dynamic shared memory than the tiles need (a spec out of step with this
  // file) would corrupt memory silently: fail the launch instead.
  uint32_t dynamic_smem;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_smem));
  if (dynamic_smem < uint32_t(SMEM_BYTES)) __trap();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  hopper::run(a, b, c, ep, M, N, K, gemm_nt_smem);
#else
  ampere::run(a, b, c, ep, M, N, K, gemm_nt_smem);
#endif
}
}  // namespace gemm_nt

// Launch (kernels/gemm_nt.toml), the same for all: block 384, grid
// (2 * max(min(U, 264), ceildiv(U, 8))) with U = ceildiv(M, 256) * ceildiv(N, 256) (any even grid
// is correct), dynamic shared memory gemm_nt::SMEM_BYTES of the arch: 220160 on sm_90a, 40960
// otherwise (a float c is staged as bf16 too: no more shared memory).
extern "C" __global__ void GEMM_NT_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_nt_bf16(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, __nv_bfloat16* __restrict__ c, int M, int N, int K) {
  gemm_nt::gemm(a, b, c, M, N, K);
}

// c[M, N] = f32(bf16(a @ b^T)): the bf16 result, rounded as gemm_nt_bf16 rounds it, written
// widened to f32 (a bf16 model's logits followed by `.float()`: its truncf and extf in one
// kernel, bit for bit the same as gemm_nt_bf16 and then the conversion).
extern "C" __global__ void GEMM_NT_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_nt_bf16_f32out(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, float* __restrict__ c, int M, int N, int K) {
  gemm_nt::gemm(a, b, c, M, N, K);
}

// A Linear with its bf16 bias, and with what follows it in a transformer (GELU in either form, the
// residual connection), the weight read as stored: see the file's header for each one's numerics.
extern "C" __global__ void GEMM_NT_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_nt_bias_bf16(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, const __nv_bfloat16* __restrict__ bias,
                  __nv_bfloat16* __restrict__ c, int M, int N, int K) {
  gemm_nt::gemm(a, b, c, M, N, K, gemm_nt::BiasAct<NoActivation>{bias});
}

extern "C" __global__ void GEMM_NT_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_nt_bias_gelu_bf16(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, const __nv_bfloat16* __restrict__ bias,
                       __nv_bfloat16* __restrict__ c, int M, int N, int K) {
  gemm_nt::gemm(a, b, c, M, N, K, gemm_nt::BiasAct<GeluTanh>{bias});
}

extern "C" __global__ void GEMM_NT_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_nt_bias_gelu_erf_bf16(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, const __nv_bfloat16* __restrict__ bias,
                           __nv_bfloat16* __restrict__ c, int M, int N, int K) {
  gemm_nt::gemm(a, b, c, M, N, K, gemm_nt::BiasAct<GeluErf>{bias});
}

extern "C" __global__ void GEMM_NT_CLUSTER_DIMS __launch_bounds__(384, 1)
gemm_nt_bias_residual_bf16(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, const __nv_bfloat16* __restrict__ bias,
                           const __nv_bfloat16* __restrict__ residual, __nv_bfloat16* __restrict__ c, int M, int N, int K) {
  gemm_nt::gemm(a, b, c, M, N, K, gemm_nt::BiasResidual{bias, residual});
}
