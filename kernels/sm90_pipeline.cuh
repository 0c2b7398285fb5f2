// The load pipeline the sm_90a GEMM bodies share (gemm.cu, gemm_nt.cu): shared-memory addresses,
// mbarrier init / arrive / expect_tx / wait, cluster rank, peer addresses and barrier, remote
// arrivals, TMA tile loads (plain and multicast) and tensor maps built on the device; and load_chunk_checked, the bounds-checked
// element-by-element fill where TMA can't be used, for any arch (gemm.cu's sm_80 body too).
#pragma once

#include <cstdint>
#include <cuda_bf16.h>

namespace sm90_pipeline {

// 8 consecutive 16-bit elements of a row starting at column `col`, zero where col + i >= cols or
// the row is out of range: the element-by-element path for unaligned shapes.
__device__ __forceinline__ uint4 load_chunk_checked(const uint16_t* row, bool row_ok, int col, int cols) {
  uint16_t v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = (row_ok && col + i < cols) ? row[col + i] : uint16_t(0);
  return make_uint4(v[0] | (uint32_t(v[1]) << 16), v[2] | (uint32_t(v[3]) << 16), v[4] | (uint32_t(v[5]) << 16),
                    v[6] | (uint32_t(v[7]) << 16));
}

}  // namespace sm90_pipeline

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace sm90_pipeline {

// The shared::cta address of a shared-memory pointer.
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// mbarriers, at shared::cta addresses.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Arrives and raises the transaction count the phase waits for by `bytes` (TMA copies to come).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Cluster helpers.
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// The shared::cluster address of `addr` (a shared::cta address) in block `rank` of the cluster.
__device__ __forceinline__ uint32_t peer_addr(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// Default semantics (release at CTA scope), as CUTLASS's ClusterBarrier: the stage's readers are
// wgmmas already waited for. The .release.cluster form made gemm.cu's kernel 2.3x slower (305 vs
// 695 TFLOP/s at 4096^3 bf16; 413 vs 651 with clusters of 1; H100, docs/gemm.md).
__device__ __forceinline__ void mbar_arrive_remote(uint32_t cluster_bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_bar) : "memory");
}

// TMA: the box at coordinates (x, y) (x the contiguous dimension) through the tensor map at
// `map` (global) into shared memory at `dst`, its bytes completing a transaction on the mbarrier
// `bar` (the whole box: parts past the matrix arrive as zeros); the multicast form writes the
// same offsets, and completes the same barrier, in every block of `mask`.
__device__ __forceinline__ void tma_load(uint32_t dst, const void* map, int x, int y, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
               "l"(map), "r"(x), "r"(y), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void tma_load_multicast(uint32_t dst, const void* map, int x, int y, uint32_t bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(map), "r"(x), "r"(y), "r"(bar), "h"(mask)
      : "memory");
}

// A 2-D tensor map for 128-byte swizzled boxes of box_rows rows x 64 columns (128 bytes) of a
// 16-bit matrix [rows, cols] whose rows are row_bytes apart, written into the 128-byte map at
// shared address `map` (zeroed first). IREE passes only buffers and 32-bit constants, so maps
// can't come from the host (cuTensorMapEncodeTiled): kernels build them with tensormap.replace,
// which sets every field; the result is byte-identical to the driver's for these maps (compared
// on an H100, driver 580, docs/gemm.md) once words 8 and 9, which no replace instruction sets,
// hold what the driver derives: the box's bytes and the swizzle span. Field codes (PTX ISA,
// tensormap.replace): element type f16 6, bf16 10; swizzle 128B 3; rank = dimensions - 1.
template <typename T>
__device__ __forceinline__ void encode_tensor_map(uint32_t map, const void* base, int rows, int cols, uint64_t row_bytes, int box_rows) {
  static_assert(sizeof(T) == 2, "16-bit elements");
  constexpr int kElemType = __is_same(T, __nv_bfloat16) ? 10 : 6;
  const uint64_t address = reinterpret_cast<uint64_t>(base);
  asm volatile(
      "tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;\n"
      "tensormap.replace.tile.rank.shared::cta.b1024.b32 [%0], 1;\n"
      "tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 0, %2;\n"
      "tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 1, %3;\n"
      "tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], 0, %4;\n"
      "tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%0], 0, 64;\n"
      "tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%0], 1, %5;\n"
      "tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%0], 0, 1;\n"
      "tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%0], 1, 1;\n"
      "tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [%0], %6;\n"
      "tensormap.replace.tile.interleave_layout.shared::cta.b1024.b32 [%0], 0;\n"
      "tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [%0], 3;\n"
      "tensormap.replace.tile.fill_mode.shared::cta.b1024.b32 [%0], 0;\n"
      "st.shared.v2.u64 [%0 + 64], {%7, 1024};\n" ::"r"(map),
      "l"(address), "r"(cols), "r"(rows), "l"(row_bytes), "r"(box_rows), "n"(kElemType), "l"(uint64_t(box_rows) * 128)
      : "memory");
}

}  // namespace sm90_pipeline
#endif
