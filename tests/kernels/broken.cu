// A deliberately wrong kernel: writes only the even elements of out. The GPU tests use it to
// prove that their output poisoning works, i.e. that a kernel skipping elements is caught.
extern "C" __global__ void mul_even_only(const float* __restrict__ lhs, const float* __restrict__ rhs,
                                        float* __restrict__ out, int n) {
  int i = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = lhs[i] * rhs[i];
}
