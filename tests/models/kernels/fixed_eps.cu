// A LayerNorm whose epsilon is built in (1e-5), one thread per row: for the model-compilation
// tests of epsilon checks (a model with another epsilon must not be replaced by it).
extern "C" __global__ void layernorm_eps5_f32(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias, float* __restrict__ out,
                                              int rows, int cols) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const float* r = x + (long long)row * cols;
  float mean = 0.f, var = 0.f;
  for (int c = 0; c < cols; ++c) mean += r[c];
  mean /= cols;
  for (int c = 0; c < cols; ++c) var += (r[c] - mean) * (r[c] - mean);
  const float rstd = rsqrtf(var / cols + 1e-5f);
  for (int c = 0; c < cols; ++c) out[(long long)row * cols + c] = (r[c] - mean) * rstd * weight[c] + bias[c];
}
