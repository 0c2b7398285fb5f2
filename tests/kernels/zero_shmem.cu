// Kernels for zero-filled outputs and dynamic shared memory sized by a dim
// (tests/support/artifacts/zero_shmem.py).

// Sums values per key into its outputs with atomicAdd: right only when they start at zero.
extern "C" __global__ void bin_sums(const int* keys, const float* values, float* sums, float* total, int n, int nbins) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && keys[i] >= 0 && keys[i] < nbins) {
    atomicAdd(&sums[keys[i]], values[i]);
    atomicAdd(total, values[i]);
  }
}

// One block per row: stages the row and its squares in 2 * d floats of dynamic shared memory,
// then sums each.
extern "C" __global__ void row_stats(const float* x, float* sums, float* squares, int rows, int d) {
  extern __shared__ float staged[];
  int row = blockIdx.x;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    float v = x[(long long)row * d + j];
    staged[j] = v;
    staged[d + j] = v * v;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f, q = 0.0f;
    for (int j = 0; j < d; ++j) {
      s += staged[j];
      q += staged[d + j];
    }
    sums[row] = s;
    squares[row] = q;
  }
}
