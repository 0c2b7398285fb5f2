// Kernels written the way open-source training and inference code writes them, declared
// unchanged (tests/style_modules.py): element types through aliases the preprocessor picks,
// scalars before and between pointers, namespaces, templates, several outputs of one shape.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#if defined(ENABLE_BF16)
typedef __nv_bfloat16 floatX;
#else
typedef float floatX;
#endif
using acc_t = float;
typedef int64_t index_t;

// LayerNorm forward over rows of C: normalized rows plus each row's mean and 1/std, two
// float outputs of one shape.
__global__ void layernorm_forward_kernel(floatX* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                                         const floatX* __restrict__ inp, const floatX* __restrict__ weight,
                                         const floatX* __restrict__ bias, int N, int C) {
  int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= N) return;
  const floatX* x = inp + (size_t)row * C;
  acc_t sum = 0.0f;
  for (int i = 0; i < C; i++) sum += (acc_t)x[i];
  acc_t m = sum / C;
  acc_t var = 0.0f;
  for (int i = 0; i < C; i++) {
    acc_t d = (acc_t)x[i] - m;
    var += d * d;
  }
  acc_t s = rsqrtf(var / C + 1e-5f);
  for (int i = 0; i < C; i++) {
    acc_t n = s * ((acc_t)x[i] - m);
    out[(size_t)row * C + i] = (floatX)(n * (acc_t)weight[i] + (acc_t)bias[i]);
  }
  mean[row] = m;
  rstd[row] = s;
}

// Scalars first, the way BLAS orders them: y = alpha * x + y.
extern "C" __global__ void axpy(int n, float alpha, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = alpha * x[i] + y[i];
}

// Scalars between pointers, one of them 64-bit: out = in * s + offset.
extern "C" __global__ void scale_offset(const float* in, index_t n, double s, float* out, float offset) {
  index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (float)((double)in[i] * s) + offset;
}

namespace ops {
// A C++ kernel in a namespace, types through the alias: out = in * in + c.
__global__ void square_plus(floatX* out, const floatX* in, acc_t c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (floatX)((acc_t)in[i] * (acc_t)in[i] + c);
}

namespace detail {
// Nested namespaces, a template instantiated for two types: out = in * factor, and the
// element count as a size_t after the pointers.
template <typename T>
__global__ void scale(const T* in, float factor, T* out, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (T)((float)in[i] * factor);
}
template __global__ void scale<__half>(const __half*, float, __half*, size_t);
template __global__ void scale<floatX>(const floatX*, float, floatX*, size_t);
}  // namespace detail
}  // namespace ops

// Two outputs of one dtype and shape, written outputs first, inputs after.
extern "C" __global__ void min_max(float* lo, float* hi, const float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    lo[i] = fminf(a[i], b[i]);
    hi[i] = fmaxf(a[i], b[i]);
  }
}
