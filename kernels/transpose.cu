// out[c][r] = in[r][c] for a [rows, cols] float tensor, through a 64x64 tile in shared memory,
// so that both the reads of `in` and the writes of `out` are coalesced rows.
//
// Each lane moves two adjacent floats as one 8-byte access on both sides. That is what reaches
// copy speed: the same tile moved one float per access measured 75-78% of a device-to-device
// copy on an H100 for any tile shape (32x32 .. 64x64) and block size, and 91-94% with float2
// accesses. A tile row (64 floats, 256 bytes) also gives DRAM longer runs than a 32-float row.
//
// The tile has 65 columns: the column reads tile[2 * lane][k] then hit bank
// (2 * lane * 65 + k) % 32 = (2 * lane + k) % 32, two lanes per bank (the minimum for 64 words),
// where a 64-float row stride would put all 32 lanes in one bank.
//
// Block: 256 threads (8 warps, each moving 8 tile rows). Grid: ceildiv(cols, 64) x
// ceildiv(rows, 64), so rows <= 65535 * 64. Edge tiles, odd sizes and pointers that are not
// 8-byte aligned (IREE bindings are only element-aligned) take a one-float-per-access path over
// the same tile.

constexpr int kTile = 64;

extern "C" __global__ void __launch_bounds__(256)
transpose_f32(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
  __shared__ float tile[kTile][kTile + 1];
  const int col0 = blockIdx.x * kTile;
  const int row0 = blockIdx.y * kTile;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const bool full = row0 + kTile <= rows && col0 + kTile <= cols;
  const bool paired = rows % 2 == 0 && cols % 2 == 0 && (reinterpret_cast<size_t>(in) & 7) == 0 && (reinterpret_cast<size_t>(out) & 7) == 0;
  if (full && paired) {
    for (int k = warp; k < kTile; k += warps) {
      const float2 v = reinterpret_cast<const float2*>(in + static_cast<size_t>(row0 + k) * cols + col0)[lane];
      tile[k][2 * lane] = v.x;
      tile[k][2 * lane + 1] = v.y;
    }
    __syncthreads();
    // Row col0 + k of `out` takes column k of the tile.
    for (int k = warp; k < kTile; k += warps)
      reinterpret_cast<float2*>(out + static_cast<size_t>(col0 + k) * rows + row0)[lane] = make_float2(tile[2 * lane][k], tile[2 * lane + 1][k]);
  } else {
    for (int k = warp; k < kTile; k += warps)
      for (int c = lane; c < kTile; c += 32)
        if (row0 + k < rows && col0 + c < cols) tile[k][c] = in[static_cast<size_t>(row0 + k) * cols + col0 + c];
    __syncthreads();
    for (int k = warp; k < kTile; k += warps)
      for (int r = lane; r < kTile; r += 32)
        if (col0 + k < cols && row0 + r < rows) out[static_cast<size_t>(col0 + k) * rows + row0 + r] = tile[r][k];
  }
}
