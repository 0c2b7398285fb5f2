// Eager attention in bf16 as torch imports it: q @ k^T and p @ v are batch matmuls of bf16 operands
// accumulating into a zero-filled f32 result; the probabilities are rounded to bf16 before the
// second. A third batch matmul, q @ w with N = 20 (not a multiple of 8), is left to IREE by
// gemm_batched_bf16. Test model.
func.func @attention(%q: tensor<6x40x64xbf16>, %k: tensor<6x40x64xbf16>, %v: tensor<6x40x64xbf16>, %w: tensor<6x64x20xbf16>) -> (tensor<6x40x64xf32>, tensor<6x40x20xf32>) {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<6x64x40xbf16>
  %kt = linalg.transpose ins(%k : tensor<6x40x64xbf16>) outs(%et : tensor<6x64x40xbf16>) permutation = [0, 2, 1]
  %es = tensor.empty() : tensor<6x40x40xf32>
  %fs = linalg.fill ins(%zero : f32) outs(%es : tensor<6x40x40xf32>) -> tensor<6x40x40xf32>
  %s = linalg.batch_matmul ins(%q, %kt : tensor<6x40x64xbf16>, tensor<6x64x40xbf16>) outs(%fs : tensor<6x40x40xf32>) -> tensor<6x40x40xf32>
  %p = linalg.softmax dimension(2) ins(%s : tensor<6x40x40xf32>) outs(%es : tensor<6x40x40xf32>) -> tensor<6x40x40xf32>
  %eb = tensor.empty() : tensor<6x40x40xbf16>
  %pb = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%p : tensor<6x40x40xf32>) outs(%eb : tensor<6x40x40xbf16>) {
  ^bb0(%x: f32, %o: bf16):
    %t = arith.truncf %x : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<6x40x40xbf16>
  %eo = tensor.empty() : tensor<6x40x64xf32>
  %fo = linalg.fill ins(%zero : f32) outs(%eo : tensor<6x40x64xf32>) -> tensor<6x40x64xf32>
  %o = linalg.batch_matmul ins(%pb, %v : tensor<6x40x40xbf16>, tensor<6x40x64xbf16>) outs(%fo : tensor<6x40x64xf32>) -> tensor<6x40x64xf32>
  %en = tensor.empty() : tensor<6x40x20xf32>
  %fn = linalg.fill ins(%zero : f32) outs(%en : tensor<6x40x20xf32>) -> tensor<6x40x20xf32>
  %n = linalg.batch_matmul ins(%q, %w : tensor<6x40x64xbf16>, tensor<6x64x20xbf16>) outs(%fn : tensor<6x40x20xf32>) -> tensor<6x40x20xf32>
  return %o, %n : tensor<6x40x64xf32>, tensor<6x40x20xf32>
}
