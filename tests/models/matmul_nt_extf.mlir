// An LM head whose bf16 logits the model converts to f32 (torch's `logits.float()` at IREE's input
// level: the matmul, its truncf to bf16 and an extf back to f32, in separate generics), for op
// kind matmul_nt+extf (kernels/gemm_nt.toml, gemm_nt_bf16_f32out): taken where each step is the
// only use of the one before; where the bf16 logits have another use, plain matmul_nt.
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#bcast = affine_map<(d0, d1, d2) -> (d1, d2)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
// [2, 5, 32] @ broadcast(transpose(w [77, 32])), f32 accumulation, rounded to bf16, widened to f32.
func.func @lm_head(%x: tensor<2x5x32xbf16>, %w: tensor<77x32xbf16>) -> tensor<2x5x77xf32> {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<32x77xbf16>
  %t = linalg.transpose ins(%w : tensor<77x32xbf16>) outs(%et : tensor<32x77xbf16>) permutation = [1, 0]
  %eb = tensor.empty() : tensor<2x32x77xbf16>
  %b = linalg.generic {indexing_maps = [#bcast, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t : tensor<32x77xbf16>) outs(%eb : tensor<2x32x77xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    linalg.yield %in : bf16
  } -> tensor<2x32x77xbf16>
  %e = tensor.empty() : tensor<2x5x77xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<2x5x77xf32>) -> tensor<2x5x77xf32>
  %c = linalg.batch_matmul ins(%x, %b : tensor<2x5x32xbf16>, tensor<2x32x77xbf16>) outs(%f : tensor<2x5x77xf32>) -> tensor<2x5x77xf32>
  %en = tensor.empty() : tensor<2x5x77xbf16>
  %n = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%c : tensor<2x5x77xf32>) outs(%en : tensor<2x5x77xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in : f32 to bf16
    linalg.yield %r : bf16
  } -> tensor<2x5x77xbf16>
  %w32 = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%n : tensor<2x5x77xbf16>) outs(%e : tensor<2x5x77xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %v = arith.extf %in : bf16 to f32
    linalg.yield %v : f32
  } -> tensor<2x5x77xf32>
  return %w32 : tensor<2x5x77xf32>
}
// The bf16 logits are returned too: the model keeps them, so the kernel writes them (matmul_nt)
// and the widening stays IREE's.
func.func @bf16_logits_used(%x: tensor<6x13xbf16>, %w: tensor<77x13xbf16>) -> (tensor<6x77xf32>, tensor<6x77xbf16>) {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<13x77xbf16>
  %t = linalg.transpose ins(%w : tensor<77x13xbf16>) outs(%et : tensor<13x77xbf16>) permutation = [1, 0]
  %e = tensor.empty() : tensor<6x77xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<6x77xf32>) -> tensor<6x77xf32>
  %c = linalg.matmul ins(%x, %t : tensor<6x13xbf16>, tensor<13x77xbf16>) outs(%f : tensor<6x77xf32>) -> tensor<6x77xf32>
  %en = tensor.empty() : tensor<6x77xbf16>
  %n = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%c : tensor<6x77xf32>) outs(%en : tensor<6x77xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in : f32 to bf16
    linalg.yield %r : bf16
  } -> tensor<6x77xbf16>
  %w32 = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%n : tensor<6x77xbf16>) outs(%e : tensor<6x77xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %v = arith.extf %in : bf16 to f32
    linalg.yield %v : f32
  } -> tensor<6x77xf32>
  return %w32, %n : tensor<6x77xf32>, tensor<6x77xbf16>
}
// Widened to f64: no kernel writes it (gemm_nt_bf16_f32out writes f32), so plain matmul_nt.
func.func @widened_to_f64(%x: tensor<6x13xbf16>, %w: tensor<77x13xbf16>) -> tensor<6x77xf64> {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<13x77xbf16>
  %t = linalg.transpose ins(%w : tensor<77x13xbf16>) outs(%et : tensor<13x77xbf16>) permutation = [1, 0]
  %e = tensor.empty() : tensor<6x77xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<6x77xf32>) -> tensor<6x77xf32>
  %c = linalg.matmul ins(%x, %t : tensor<6x13xbf16>, tensor<13x77xbf16>) outs(%f : tensor<6x77xf32>) -> tensor<6x77xf32>
  %en = tensor.empty() : tensor<6x77xbf16>
  %n = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%c : tensor<6x77xf32>) outs(%en : tensor<6x77xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in : f32 to bf16
    linalg.yield %r : bf16
  } -> tensor<6x77xbf16>
  %e64 = tensor.empty() : tensor<6x77xf64>
  %w64 = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%n : tensor<6x77xbf16>) outs(%e64 : tensor<6x77xf64>) {
  ^bb0(%in: bf16, %out: f64):
    %v = arith.extf %in : bf16 to f64
    linalg.yield %v : f64
  } -> tensor<6x77xf64>
  return %w64 : tensor<6x77xf64>
}
