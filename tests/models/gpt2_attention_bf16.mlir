// GPT-2 small's bf16 batch matmuls at batch 8 x 1024 tokens, 12 heads of 64 (report only: too large
// to run on the CPU): attention's scores q @ k^T (96x1024x64 @ 96x64x1024) and context p @ v
// (96x1024x1024 @ 96x1024x64), bf16 operands accumulating into f32, and the LM head, a batch matmul
// whose rhs is one [768, 50257] matrix broadcast over the batch. Test model.
func.func @main(%q: tensor<96x1024x64xbf16>, %k: tensor<96x1024x64xbf16>, %v: tensor<96x1024x64xbf16>, %x: tensor<8x1024x768xbf16>, %wte: tensor<768x50257xbf16>)
    -> (tensor<96x1024x64xf32>, tensor<8x1024x50257xf32>) {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<96x64x1024xbf16>
  %kt = linalg.transpose ins(%k : tensor<96x1024x64xbf16>) outs(%et : tensor<96x64x1024xbf16>) permutation = [0, 2, 1]
  %es = tensor.empty() : tensor<96x1024x1024xf32>
  %fs = linalg.fill ins(%zero : f32) outs(%es : tensor<96x1024x1024xf32>) -> tensor<96x1024x1024xf32>
  %s = linalg.batch_matmul ins(%q, %kt : tensor<96x1024x64xbf16>, tensor<96x64x1024xbf16>) outs(%fs : tensor<96x1024x1024xf32>) -> tensor<96x1024x1024xf32>
  %eb = tensor.empty() : tensor<96x1024x1024xbf16>
  %pb = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%s : tensor<96x1024x1024xf32>) outs(%eb : tensor<96x1024x1024xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<96x1024x1024xbf16>
  %eo = tensor.empty() : tensor<96x1024x64xf32>
  %fo = linalg.fill ins(%zero : f32) outs(%eo : tensor<96x1024x64xf32>) -> tensor<96x1024x64xf32>
  %o = linalg.batch_matmul ins(%pb, %v : tensor<96x1024x1024xbf16>, tensor<96x1024x64xbf16>) outs(%fo : tensor<96x1024x64xf32>) -> tensor<96x1024x64xf32>
  %ew = tensor.empty() : tensor<8x768x50257xbf16>
  %wb = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%wte : tensor<768x50257xbf16>) outs(%ew : tensor<8x768x50257xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    linalg.yield %in : bf16
  } -> tensor<8x768x50257xbf16>
  %el = tensor.empty() : tensor<8x1024x50257xf32>
  %fl = linalg.fill ins(%zero : f32) outs(%el : tensor<8x1024x50257xf32>) -> tensor<8x1024x50257xf32>
  %l = linalg.batch_matmul ins(%x, %wb : tensor<8x1024x768xbf16>, tensor<8x768x50257xbf16>) outs(%fl : tensor<8x1024x50257xf32>) -> tensor<8x1024x50257xf32>
  return %o, %l : tensor<96x1024x64xf32>, tensor<8x1024x50257xf32>
}
