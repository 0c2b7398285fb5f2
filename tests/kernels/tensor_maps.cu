// Exposes the GEMM's device-side tensor-map builder (kernels/gemm.cu, sm_90a) as a kernel, so a
// GPU test can compare its maps with the CUDA driver's cuTensorMapEncodeTiled for the same
// matrices (tests/library/test_gpu_gemm.py). Launch: one warp; `home` 128-byte aligned, 256 bytes.
#include "gemm.cu"

template <typename T>
__device__ void publish_maps(const T* a, const T* b, uint8_t* home, int M, int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(128) uint64_t staging[2][16];
  gemm::build_tensor_maps<T>(staging, home, a, b, M, N, K);
#endif
}

extern "C" __global__ void __launch_bounds__(32) tensor_maps_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, uint8_t* home, int M, int N, int K) {
  publish_maps(a, b, home, M, N, K);
}

extern "C" __global__ void __launch_bounds__(32) tensor_maps_f16(const __half* a, const __half* b, uint8_t* home, int M, int N, int K) {
  publish_maps(a, b, home, M, N, K);
}
