// Kernels over CUDA vector types: pointers to float4, half2, uchar4 and a template over int2.
#include <cuda_fp16.h>

// y = a * x, one float4 (16-byte load and store) per thread.
extern "C" __global__ void scale_f4(const float4* __restrict__ x, float4* __restrict__ y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float4 v = x[i];
    y[i] = make_float4(a * v.x, a * v.y, a * v.z, a * v.w);
  }
}

// y += x on pairs of halves, read from a non-const pointer: its role comes from the PTX.
extern "C" __global__ void add_h2(half2* x, half2* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __hadd2(x[i], y[i]);
}

// RGBA pixels: out = 255 - in, per channel.
extern "C" __global__ void invert_rgba(const uchar4* in, uchar4* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    uchar4 p = in[i];
    out[i] = make_uchar4(255 - p.x, 255 - p.y, 255 - p.z, 255 - p.w);
  }
}

// out = (x.y, x.x): swaps the lanes of any two-lane vector type.
template <typename V>
__global__ void swap_lanes(const V* x, V* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    V v = x[i];
    out[i].x = v.y;
    out[i].y = v.x;
  }
}
