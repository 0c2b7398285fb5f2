// A shape computed from the data: the first n rows of a, through two matmuls, summed over the rows.
// Static arguments and result, dynamic intermediates. Test model for the transient storage.
func.func @f(%a: tensor<64x32xf32>, %w: tensor<32x32xf32>, %n: tensor<i64>) -> tensor<32xf32> {
  %i = tensor.extract %n[] : tensor<i64>
  %rows = arith.index_cast %i : i64 to index
  %s = tensor.extract_slice %a[0, 0] [%rows, 32] [1, 1] : tensor<64x32xf32> to tensor<?x32xf32>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%rows) : tensor<?x32xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<?x32xf32>) -> tensor<?x32xf32>
  %m = linalg.matmul ins(%s, %w : tensor<?x32xf32>, tensor<32x32xf32>) outs(%f : tensor<?x32xf32>) -> tensor<?x32xf32>
  %m2 = linalg.matmul ins(%m, %w : tensor<?x32xf32>, tensor<32x32xf32>) outs(%f : tensor<?x32xf32>) -> tensor<?x32xf32>
  %e2 = tensor.empty() : tensor<32xf32>
  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<32xf32>) -> tensor<32xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>], iterator_types = ["reduction", "parallel"]} ins(%m2 : tensor<?x32xf32>) outs(%f2 : tensor<32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %x = arith.addf %in, %out : f32
    linalg.yield %x : f32
  } -> tensor<32xf32>
  return %r : tensor<32xf32>
}
