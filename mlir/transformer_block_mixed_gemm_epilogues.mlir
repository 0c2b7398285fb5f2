// The transformer block of mlir/transformer_block_codegen.mlir (same function, same sizes:
// T = 8192, D = 1024, H = 4096) as mlir/transformer_block_mixed_gemm.mlir, with the GEMMs'
// epilogues fused into them: the first matmul writes h = bf16(gelu_tanh(bf16(x) @ W1 + b1))
// directly (gemm.gemm_bias_gelu_bf16), the second y = (h @ W2 + b2) + x
// (gemm.gemm_bias_residual_f32), so neither the f32 intermediate a1 nor a separate residual
// pass exists. The same arithmetic as mixed_gemm, in the same order: the same bits.
// IREE generates only bf16(x).
//
//   iree-dispatch build kernels/transformer.toml kernels/gemm.toml \
//       --program mlir/transformer_block_mixed_gemm_epilogues.mlir -o build/transformer_block_mixed_gemm_epilogues.vmfb
#rc = affine_map<(r, c) -> (r, c)>
module @transformer_block_mixed_gemm_epilogues {
  func.func private @gemm.gemm_bias_gelu_bf16(tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xf32>) -> tensor<?x?xbf16>
  func.func private @gemm.gemm_bias_residual_f32(tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
  func.func private @transformer.layernorm_warp_f32(tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, f32) -> tensor<?x?xf32>
  func.func private @transformer.softmax_warp_f32(tensor<?x?xf32>) -> tensor<?x?xf32>

  func.func @transformer_block(%x: tensor<8192x1024xf32>, %w1: tensor<1024x4096xbf16>, %b1: tensor<4096xf32>,
                               %w2: tensor<4096x1024xbf16>, %b2: tensor<1024xf32>, %gamma: tensor<1024xf32>,
                               %beta: tensor<1024xf32>) -> (tensor<8192x1024xf32>, tensor<8192x1024xf32>) {
    %eps = arith.constant 1.0e-05 : f32

    // bf16(x): IREE
    %xb_init = tensor.empty() : tensor<8192x1024xbf16>
    %xb = linalg.generic {indexing_maps = [#rc, #rc], iterator_types = ["parallel", "parallel"]}
        ins(%x : tensor<8192x1024xf32>) outs(%xb_init : tensor<8192x1024xbf16>) {
    ^bb0(%v: f32, %o: bf16):
      %t = arith.truncf %v : f32 to bf16
      linalg.yield %t : bf16
    } -> tensor<8192x1024xbf16>

    // h = bf16(gelu_tanh(bf16(x) @ W1 + b1)): one hand-written GEMM with its epilogue
    %xb_dyn = tensor.cast %xb : tensor<8192x1024xbf16> to tensor<?x?xbf16>
    %w1_dyn = tensor.cast %w1 : tensor<1024x4096xbf16> to tensor<?x?xbf16>
    %b1_dyn = tensor.cast %b1 : tensor<4096xf32> to tensor<?xf32>
    %h_dyn = func.call @gemm.gemm_bias_gelu_bf16(%xb_dyn, %w1_dyn, %b1_dyn) : (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xf32>) -> tensor<?x?xbf16>

    // y = (h @ W2 + b2) + x: one hand-written GEMM with its epilogue
    %w2_dyn = tensor.cast %w2 : tensor<4096x1024xbf16> to tensor<?x?xbf16>
    %b2_dyn = tensor.cast %b2 : tensor<1024xf32> to tensor<?xf32>
    %x_dyn = tensor.cast %x : tensor<8192x1024xf32> to tensor<?x?xf32>
    %y_dyn = func.call @gemm.gemm_bias_residual_f32(%h_dyn, %w2_dyn, %b2_dyn, %x_dyn)
        : (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>

    // z = layernorm(y) * gamma + beta, out = softmax(z): hand-written kernels (a warp per row)
    %gamma_dyn = tensor.cast %gamma : tensor<1024xf32> to tensor<?xf32>
    %beta_dyn = tensor.cast %beta : tensor<1024xf32> to tensor<?xf32>
    %z_dyn = func.call @transformer.layernorm_warp_f32(%y_dyn, %gamma_dyn, %beta_dyn, %eps)
        : (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, f32) -> tensor<?x?xf32>
    %out_dyn = func.call @transformer.softmax_warp_f32(%z_dyn) : (tensor<?x?xf32>) -> tensor<?x?xf32>
    %z = tensor.cast %z_dyn : tensor<?x?xf32> to tensor<8192x1024xf32>
    %out = tensor.cast %out_dyn : tensor<?x?xf32> to tensor<8192x1024xf32>
    return %z, %out : tensor<8192x1024xf32>, tensor<8192x1024xf32>
  }
}
