// The two kernels of IREE's CUDA custom-dispatch sample, written for iree_dispatch:
// plain extern "C" kernels, one element per thread.

extern "C" __global__ void simple_mul(const float* __restrict__ lhs, const float* __restrict__ rhs,
                                      float* __restrict__ out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = lhs[i] * rhs[i];
}

// rhs *= lhs, in place.
extern "C" __global__ void simple_mul_inplace(const float* __restrict__ lhs, float* __restrict__ rhs, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) rhs[i] *= lhs[i];
}
