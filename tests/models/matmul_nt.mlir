// Matmuls whose rhs is a transposed [N, K] matrix (torch's linear(x, w) at IREE's input level),
// for op kind matmul_nt (tests/models/kernels/gemm_nt.toml): taken where the f32 result's only
// use rounds it to bf16, refused otherwise, each for its own reason.
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#bcast = affine_map<(d0, d1, d2) -> (d1, d2)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
// An LM head: [4, 3, 16] @ broadcast(transpose(w [77, 16])), f32 accumulation, rounded to bf16.
func.func @lm_head(%x: tensor<4x3x16xbf16>, %w: tensor<77x16xbf16>) -> tensor<4x3x77xbf16> {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<16x77xbf16>
  %t = linalg.transpose ins(%w : tensor<77x16xbf16>) outs(%et : tensor<16x77xbf16>) permutation = [1, 0]
  %eb = tensor.empty() : tensor<4x16x77xbf16>
  %b = linalg.generic {indexing_maps = [#bcast, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%t : tensor<16x77xbf16>) outs(%eb : tensor<4x16x77xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    linalg.yield %in : bf16
  } -> tensor<4x16x77xbf16>
  %e = tensor.empty() : tensor<4x3x77xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x3x77xf32>) -> tensor<4x3x77xf32>
  %c = linalg.batch_matmul ins(%x, %b : tensor<4x3x16xbf16>, tensor<4x16x77xbf16>) outs(%f : tensor<4x3x77xf32>) -> tensor<4x3x77xf32>
  %en = tensor.empty() : tensor<4x3x77xbf16>
  %n = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%c : tensor<4x3x77xf32>) outs(%en : tensor<4x3x77xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in : f32 to bf16
    linalg.yield %r : bf16
  } -> tensor<4x3x77xbf16>
  return %n : tensor<4x3x77xbf16>
}
// The f32 result is returned too: the model keeps it, a bf16-writing kernel can't replace it.
func.func @f32_result_used(%x: tensor<6x16xbf16>, %w: tensor<77x16xbf16>) -> (tensor<6x77xf32>, tensor<6x77xbf16>) {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<16x77xbf16>
  %t = linalg.transpose ins(%w : tensor<77x16xbf16>) outs(%et : tensor<16x77xbf16>) permutation = [1, 0]
  %e = tensor.empty() : tensor<6x77xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<6x77xf32>) -> tensor<6x77xf32>
  %c = linalg.matmul ins(%x, %t : tensor<6x16xbf16>, tensor<16x77xbf16>) outs(%f : tensor<6x77xf32>) -> tensor<6x77xf32>
  %en = tensor.empty() : tensor<6x77xbf16>
  %n = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%c : tensor<6x77xf32>) outs(%en : tensor<6x77xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in : f32 to bf16
    linalg.yield %r : bf16
  } -> tensor<6x77xbf16>
  return %c, %n : tensor<6x77xf32>, tensor<6x77xbf16>
}
// An f32 model: f32 operands.
func.func @f32_model(%x: tensor<6x16xf32>, %w: tensor<77x16xf32>) -> tensor<6x77xf32> {
  %zero = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<16x77xf32>
  %t = linalg.transpose ins(%w : tensor<77x16xf32>) outs(%et : tensor<16x77xf32>) permutation = [1, 0]
  %e = tensor.empty() : tensor<6x77xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<6x77xf32>) -> tensor<6x77xf32>
  %c = linalg.matmul ins(%x, %t : tensor<6x16xf32>, tensor<16x77xf32>) outs(%f : tensor<6x77xf32>) -> tensor<6x77xf32>
  return %c : tensor<6x77xf32>
}
// Accumulates in bf16 (a bf16 result, no f32 in between): the kernel's f32 accumulation is wider.
func.func @bf16_accumulator(%x: tensor<6x16xbf16>, %w: tensor<77x16xbf16>) -> tensor<6x77xbf16> {
  %zero = arith.constant 0.0 : bf16
  %et = tensor.empty() : tensor<16x77xbf16>
  %t = linalg.transpose ins(%w : tensor<77x16xbf16>) outs(%et : tensor<16x77xbf16>) permutation = [1, 0]
  %e = tensor.empty() : tensor<6x77xbf16>
  %f = linalg.fill ins(%zero : bf16) outs(%e : tensor<6x77xbf16>) -> tensor<6x77xbf16>
  %c = linalg.matmul ins(%x, %t : tensor<6x16xbf16>, tensor<16x77xbf16>) outs(%f : tensor<6x77xbf16>) -> tensor<6x77xbf16>
  return %c : tensor<6x77xbf16>
}
