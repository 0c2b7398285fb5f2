// The load pipeline the sm_90a GEMM bodies share (gemm.cu, gemm_nt.cu): shared-memory addresses,
// mbarrier init / arrive / expect_tx / wait, cluster rank, peer addresses and barrier, remote
// arrivals, and TMA tile loads (plain and multicast); and load_chunk_checked, the bounds-checked
// element-by-element fill where TMA can't be used, for any arch (gemm.cu's sm_80 body too).
#pragma once

#include <cstdint>

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

}  // namespace sm90_pipeline
#endif
