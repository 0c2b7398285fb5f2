// Kernels that take structs and CUDA vector types by value (tests/frontend/test_struct_params.py,
// run on the GPU by tests/frontend/test_gpu_struct_params.py).
#include <cuda_fp16.h>

struct Shape {
  int m, n;
  float alpha;
};

// Padding and alignment: a bool and a short between words, a double aligned to 8.
struct Mixed {
  bool negate;
  short offset;
  int count;
  double scale;
  unsigned char bias;
};

typedef struct {
  int a;
  float b;
} Pair;

struct Nested {
  Pair pair;
  int dims[3];
  float2 shift;
};

// c[i, j] = alpha * a[i, j] + n for an m x n matrix (the grid and shapes use s.m and s.n).
extern "C" __global__ void scale_shape(const float* a, float* c, Shape s) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < s.m * s.n) c[i] = s.alpha * a[i] + (float)s.n;
}

// The struct before the pointers, const __grid_constant__ as CUTLASS passes its Params.
extern "C" __global__ void mixed(const __grid_constant__ Mixed p, const double* x, double* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && i < p.count) {
    double v = x[i] * p.scale + p.offset + p.bias;
    y[i] = p.negate ? -v : v;
  }
}

extern "C" __global__ void nested(const float* x, float* y, Nested s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * s.pair.b + s.pair.a + s.dims[i % 3] + s.shift.x - s.shift.y;
}

// Vectors by value: their lanes are fields x, y, z, w.
extern "C" __global__ void axpy_vectors(const float* x, float* y, float2 ab, half2 h, int4 q, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = ab.x * x[i] + ab.y + __half2float(h.x) * __half2float(h.y) + (float)(q.x + q.y + q.z + q.w);
}
