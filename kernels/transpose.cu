// out[c][r] = in[r][c] for a [rows, cols] float tensor, through a 32x32 tile in shared memory,
// so that both the reads of `in` and the writes of `out` are coalesced 128-byte rows.
//
// The tile has 33 columns: a thread reading down a column of the tile then hits bank
// (row * 33 + col) % 32 = (row + col) % 32, a different bank for each of the 32 lanes, where a
// 32-float row stride would put all of them in the same bank (a 32-way conflict).
//
// Block: 32 x blockDim.y threads, blockDim.y a divisor of 32 (the spec says 32 x 2), each
// moving 32 / blockDim.y elements of the tile. Grid: ceildiv(cols, 32) x ceildiv(rows, 32), so
// rows <= 65535 * 32 (the grid's y limit); the edge tiles are partial.

constexpr int kTile = 32;

extern "C" __global__ void __launch_bounds__(1024)
transpose_f32(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
  __shared__ float tile[kTile][kTile + 1];
  const int col0 = blockIdx.x * kTile;
  const int row0 = blockIdx.y * kTile;
  for (int k = threadIdx.y; k < kTile; k += blockDim.y) {
    const int r = row0 + k, c = col0 + threadIdx.x;
    if (r < rows && c < cols) tile[k][threadIdx.x] = in[static_cast<size_t>(r) * cols + c];
  }
  __syncthreads();
  // Row col0 + k of `out` takes column k of the tile.
  for (int k = threadIdx.y; k < kTile; k += blockDim.y) {
    const int c = col0 + k, r = row0 + threadIdx.x;
    if (c < cols && r < rows) out[static_cast<size_t>(c) * rows + r] = tile[threadIdx.x][k];
  }
}
