// A source that instantiates its template itself, as code launched from its own host code
// often does: naming that instantiation in a spec must not instantiate it twice.
template <typename T, int SHIFT>
__global__ void shift(const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * T(SHIFT) - T(1);
}

template __global__ void shift<float, 3>(const float*, float*, int);
