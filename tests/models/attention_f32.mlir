// Eager attention as linalg: scores = q @ k^T (batch_matmul after a transpose), softmax over the
// last dim (linalg.softmax, as IREE's global optimization raises it), then @ v. Test model.
func.func @attention(%q: tensor<8x16x32xf32>, %k: tensor<8x16x32xf32>, %v: tensor<8x16x32xf32>) -> tensor<8x16x32xf32> {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<8x32x16xf32>
  %kt = linalg.transpose ins(%k : tensor<8x16x32xf32>) outs(%et : tensor<8x32x16xf32>) permutation = [0, 2, 1]
  %es = tensor.empty() : tensor<8x16x16xf32>
  %fs = linalg.fill ins(%zero : f32) outs(%es : tensor<8x16x16xf32>) -> tensor<8x16x16xf32>
  %s = linalg.batch_matmul ins(%q, %kt : tensor<8x16x32xf32>, tensor<8x32x16xf32>) outs(%fs : tensor<8x16x16xf32>) -> tensor<8x16x16xf32>
  %p = linalg.softmax dimension(2) ins(%s : tensor<8x16x16xf32>) outs(%es : tensor<8x16x16xf32>) -> tensor<8x16x16xf32>
  %eo = tensor.empty() : tensor<8x16x32xf32>
  %fo = linalg.fill ins(%zero : f32) outs(%eo : tensor<8x16x32xf32>) -> tensor<8x16x32xf32>
  %o = linalg.batch_matmul ins(%p, %v : tensor<8x16x16xf32>, tensor<8x16x32xf32>) outs(%fo : tensor<8x16x32xf32>) -> tensor<8x16x32xf32>
  return %o : tensor<8x16x32xf32>
}
