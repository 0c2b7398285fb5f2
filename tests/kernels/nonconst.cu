// Kernels in the style much public CUDA code is written in: inputs passed through non-const
// pointers, scalars first, atomics into caller memory, helpers in device functions. Nothing here
// tells an input from an output; the build reads it from the compiled code.

#define TILE 32
#define ROWS_PER_PASS 8

// out[x][y] = in[y][x] for a height x width input, one 32x32 tile per block, 32x8 threads.
__global__ void transpose_naive(float *odata, float *idata, int width, int height)
{
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS_PER_PASS)
        if (x < width && y + j < height)
            odata[x * height + (y + j)] = idata[(y + j) * width + x];
}

// The same through a shared-memory tile (coalesced reads and writes).
__global__ void transpose_tiled(float *odata, float *idata, int width, int height)
{
    __shared__ float tile[TILE][TILE + 1];
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS_PER_PASS)
        if (x < width && y + j < height)
            tile[threadIdx.y + j][threadIdx.x] = idata[(y + j) * width + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;
    y = blockIdx.x * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS_PER_PASS)
        if (x < height && y + j < width)
            odata[(y + j) * height + x] = tile[threadIdx.x][threadIdx.y + j];
}

// y = a * x + y: y is read and written.
__global__ void saxpy(int n, float a, float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

// bins[v] += number of elements equal to v: the counts accumulate into the caller's bins.
__global__ void histogram256(unsigned int *bins, unsigned char *data, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&bins[data[i]], 1u);
}

// One partial sum per block of 256 elements.
__global__ void block_sums(float *g_idata, float *g_odata, unsigned int n)
{
    __shared__ float partial[256];
    unsigned int tid = threadIdx.x, i = blockIdx.x * blockDim.x + threadIdx.x;
    partial[tid] = i < n ? g_idata[i] : 0.0f;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) partial[tid] += partial[tid + s];
        __syncthreads();
    }
    if (tid == 0) g_odata[blockIdx.x] = partial[0];
}

// C = A * B for row-major A (hA x wA) and B (wA x wB), naive.
__global__ void matrix_mul(float *C, float *A, float *B, int hA, int wA, int wB)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= hA || col >= wB) return;
    float sum = 0.0f;
    for (int k = 0; k < wA; ++k) sum += A[row * wA + k] * B[k * wB + col];
    C[row * wB + col] = sum;
}

// A lookup through a helper the compiler keeps as a call, and a local alias of the table.
__device__ __noinline__ float lookup(float *table, int *idx, int i)
{
    float *base = table + 1;
    return base[idx[i] - 1];
}

__global__ void gather(float *out, float *table, int *idx, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = lookup(table, idx, i);
}

// The source pointer is chosen by one thread and shared through shared memory: the address
// leaves the registers, so how `a` and `b` are used can't be traced.
__global__ void pick(float *out, float *a, float *b, int use_a, int n)
{
    __shared__ float *chosen;
    if (threadIdx.x == 0) chosen = use_a ? a : b;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * chosen[i];
}
