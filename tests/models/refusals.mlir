// Ops that look replaceable but are not, each for its own reason (test model for
// iree-dispatch compile with tests/models/kernels/{naive,gemm,library}.toml).
func.func @bf16_accumulator(%a: tensor<64x64xbf16>, %b: tensor<64x64xbf16>) -> tensor<64x64xbf16> {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<64x64xbf16>
  %f = linalg.fill ins(%zero : bf16) outs(%e : tensor<64x64xbf16>) -> tensor<64x64xbf16>
  %c = linalg.matmul ins(%a, %b : tensor<64x64xbf16>, tensor<64x64xbf16>) outs(%f : tensor<64x64xbf16>) -> tensor<64x64xbf16>
  return %c : tensor<64x64xbf16>
}
func.func @f64_matmul(%a: tensor<16x16xf64>, %b: tensor<16x16xf64>) -> tensor<16x16xf64> {
  %zero = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<16x16xf64>
  %f = linalg.fill ins(%zero : f64) outs(%e : tensor<16x16xf64>) -> tensor<16x16xf64>
  %c = linalg.matmul ins(%a, %b : tensor<16x16xf64>, tensor<16x16xf64>) outs(%f : tensor<16x16xf64>) -> tensor<16x16xf64>
  return %c : tensor<16x16xf64>
}
func.func @k_not_divisible(%a: tensor<16x6xf32>, %b: tensor<6x16xf32>) -> tensor<16x16xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x16xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  %c = linalg.matmul ins(%a, %b : tensor<16x6xf32>, tensor<6x16xf32>) outs(%f : tensor<16x16xf32>) -> tensor<16x16xf32>
  return %c : tensor<16x16xf32>
}
func.func @transposed_rhs(%a: tensor<16x8xf32>, %b: tensor<32x8xf32>) -> tensor<16x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<16x32xf32>) -> tensor<16x32xf32>
  %c = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>]
      ins(%a, %b : tensor<16x8xf32>, tensor<32x8xf32>) outs(%f : tensor<16x32xf32>) -> tensor<16x32xf32>
  return %c : tensor<16x32xf32>
}
func.func @accumulates_into_c(%a: tensor<16x8xf32>, %b: tensor<8x16xf32>, %acc: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %c = linalg.matmul ins(%a, %b : tensor<16x8xf32>, tensor<8x16xf32>) outs(%acc : tensor<16x16xf32>) -> tensor<16x16xf32>
  return %c : tensor<16x16xf32>
}
func.func @softmax_dim0(%x: tensor<16x32xf32>) -> tensor<16x32xf32> {
  %e = tensor.empty() : tensor<16x32xf32>
  %s = linalg.softmax dimension(0) ins(%x : tensor<16x32xf32>) outs(%e : tensor<16x32xf32>) -> tensor<16x32xf32>
  return %s : tensor<16x32xf32>
}
func.func @long_rows(%x: tensor<4x2048xf32>) -> tensor<4x2048xf32> {
  %e = tensor.empty() : tensor<4x2048xf32>
  %s = linalg.softmax dimension(1) ins(%x : tensor<4x2048xf32>) outs(%e : tensor<4x2048xf32>) -> tensor<4x2048xf32>
  return %s : tensor<4x2048xf32>
}
