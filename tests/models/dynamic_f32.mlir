// Dynamic sizes: a Linear over a dynamic number of rows (matmul + bias), a softmax and a LayerNorm
// over dynamic rows of static length, and a matmul with a dynamic K. Test model.
func.func @linear(%x: tensor<?x64xf32>, %w: tensor<64x32xf32>, %b: tensor<32xf32>) -> tensor<?x32xf32> {
  %zero = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : tensor<?x64xf32>
  %e = tensor.empty(%m) : tensor<?x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<?x32xf32>) -> tensor<?x32xf32>
  %y = linalg.matmul ins(%x, %w : tensor<?x64xf32>, tensor<64x32xf32>) outs(%f : tensor<?x32xf32>) -> tensor<?x32xf32>
  %yb = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
      ins(%y, %b : tensor<?x32xf32>, tensor<32xf32>) outs(%e : tensor<?x32xf32>) {
  ^bb0(%in: f32, %bias: f32, %out: f32):
    %s = arith.addf %in, %bias : f32
    linalg.yield %s : f32
  } -> tensor<?x32xf32>
  return %yb : tensor<?x32xf32>
}
func.func @softmax_rows(%x: tensor<?x4x48xf32>) -> tensor<?x4x48xf32> {
  %c0 = arith.constant 0 : index
  %b = tensor.dim %x, %c0 : tensor<?x4x48xf32>
  %e = tensor.empty(%b) : tensor<?x4x48xf32>
  %s = linalg.softmax dimension(2) ins(%x : tensor<?x4x48xf32>) outs(%e : tensor<?x4x48xf32>) -> tensor<?x4x48xf32>
  return %s : tensor<?x4x48xf32>
}
func.func @dynamic_k(%a: tensor<16x?xf32>, %b: tensor<?x16xf32>) -> tensor<16x16xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x16xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  %c = linalg.matmul ins(%a, %b : tensor<16x?xf32>, tensor<?x16xf32>) outs(%f : tensor<16x16xf32>) -> tensor<16x16xf32>
  return %c : tensor<16x16xf32>
}
