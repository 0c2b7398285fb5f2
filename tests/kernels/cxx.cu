// C++ kernels as CUDA programmers write them: templates, no extern "C", dynamic shared memory,
// __launch_bounds__, 3-D launches.

// A template, instantiated explicitly for the types the spec names (scale<float>, scale<double>).
template <typename T>
__global__ void scale(const T* __restrict__ x, T* __restrict__ y, T factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = factor * x[i];
}
template __global__ void scale<float>(const float*, float*, float, int);
template __global__ void scale<double>(const double*, double*, double, int);

// Sum of each row: one block per row, a tree reduction in dynamic shared memory
// (blockDim.x floats, sized by the spec), warp shuffles for the last 32 partial sums.
__global__ void __launch_bounds__(256) row_sum(const float* __restrict__ in, float* __restrict__ out, int cols) {
  extern __shared__ float partial[];
  const float* row = in + (size_t)blockIdx.x * cols;
  float sum = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += row[c];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride >= 32; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x < 32) {
    float v = partial[threadIdx.x];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
  }
}

// out[z][y][x] = in[z][y][x] + 1000 * z + 100 * y + x on a 3-D grid of 3-D blocks.
__global__ void index3d(const float* __restrict__ in, float* __restrict__ out, int nx, int ny, int nz) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  int z = blockIdx.z * blockDim.z + threadIdx.z;
  if (x < nx && y < ny && z < nz) {
    size_t i = ((size_t)z * ny + y) * nx + x;
    out[i] = in[i] + 1000.f * z + 100.f * y + x;
  }
}
