// Plain float32 matmul kernels for the model-compilation tests: one thread per output element,
// correct for any sizes, not fast. c[M, N] = a[M, K] @ b[K, N] (+ bias[N]); batched: per batch.
extern "C" __global__ void matmul_f32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int M, int N, int K) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y;
  if (col >= N || row >= M) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += a[row * K + k] * b[k * N + col];
  c[row * N + col] = acc;
}

extern "C" __global__ void matmul_bias_f32(const float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ bias, float* __restrict__ c, int M, int N,
                                           int K) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y;
  if (col >= N || row >= M) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += a[row * K + k] * b[k * N + col];
  c[row * N + col] = acc + bias[col];
}

extern "C" __global__ void batch_matmul_f32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int B, int M, int N, int K) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y, batch = blockIdx.z;
  if (col >= N || row >= M || batch >= B) return;
  const float* ab = a + (long long)batch * M * K;
  const float* bb = b + (long long)batch * K * N;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += ab[row * K + k] * bb[k * N + col];
  c[((long long)batch * M + row) * N + col] = acc;
}
