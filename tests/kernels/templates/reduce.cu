// Kernels as public CUDA code writes them, with non-type template parameters and defaults, and
// no explicit instantiation: iree_dispatch instantiates the ones a spec names.
#include "reduce_ops.h"

// The CUDA samples' reduce6: each block sums blockSize * 2 elements per grid stride into one
// partial sum g_odata[blockIdx.x]. nIsPow2 lets the loop skip its bounds check.
template <class T, unsigned int blockSize, bool nIsPow2>
__global__ void reduce(T* g_idata, T* g_odata, unsigned int n) {
  T* sdata = SharedMemory<T>();
  unsigned int tid = threadIdx.x;
  unsigned int i = blockIdx.x * blockSize * 2 + threadIdx.x;
  unsigned int gridSize = blockSize * 2 * gridDim.x;
  T mySum = 0;
  while (i < n) {
    mySum += g_idata[i];
    if (nIsPow2 || i + blockSize < n) mySum += g_idata[i + blockSize];
    i += gridSize;
  }
  sdata[tid] = mySum;
  __syncthreads();
  for (unsigned int s = blockSize / 2; s > 0; s >>= 1) {
    if (tid < s) sdata[tid] = mySum = mySum + sdata[tid + s];
    __syncthreads();
  }
  if (tid == 0) g_odata[blockIdx.x] = mySum;
}

// y = x + N, with a defaulted non-type parameter.
template <typename T, int N = 4>
__global__ void add_n(const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + T(N);
}

// y = s * x, one BLOCK-element tile per block (BLOCK threads), staged through static shared memory.
template <int BLOCK = 256>
__global__ void scale_tiles(const float* x, float* y, float s, int n) {
  __shared__ float tile[BLOCK];
  int i = blockIdx.x * BLOCK + threadIdx.x;
  tile[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  if (i < n) y[i] = s * tile[threadIdx.x];
}
