// The transformer block of mlir/transformer_block_codegen.mlir (same function, same sizes:
// T = 8192, D = 1024, H = 4096) with the hand-written GEMM for both matmuls and hand-written
// LayerNorm and softmax, but bias + GELU + the bf16 cast left to IREE, which generates them as
// one elementwise dispatch (f32 in, bf16 out), where mlir/transformer_block_mixed_gemm.mlir calls
// the bias_gelu_f32_bf16 kernel: IREE's elementwise code against the kernel, the rest equal
// (docs/transformer_block.md). Built like mlir/transformer_block_mixed_gemm.mlir:
//   iree-dispatch build kernels/transformer.toml kernels/gemm.toml \
//       --program mlir/transformer_block_mixed_gemm_fused.mlir -o build/transformer_block_mixed_gemm_fused.vmfb
#rc = affine_map<(r, c) -> (r, c)>
#c = affine_map<(r, c) -> (c)>
module @transformer_block_mixed_gemm_fused {
  func.func private @gemm.gemm_bf16(tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xf32>
  func.func private @transformer.layernorm_warp_f32(tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, f32) -> tensor<?x?xf32>
  func.func private @transformer.softmax_warp_f32(tensor<?x?xf32>) -> tensor<?x?xf32>

  func.func @transformer_block(%x: tensor<8192x1024xf32>, %w1: tensor<1024x4096xbf16>, %b1: tensor<4096xf32>,
                               %w2: tensor<4096x1024xbf16>, %b2: tensor<1024xf32>, %gamma: tensor<1024xf32>,
                               %beta: tensor<1024xf32>) -> (tensor<8192x1024xf32>, tensor<8192x1024xf32>) {
    %eps = arith.constant 1.0e-05 : f32
    %half = arith.constant 0.5 : f32
    %one = arith.constant 1.0 : f32
    %sqrt_2_over_pi = arith.constant 0.7978845608028654 : f32
    %gelu_c = arith.constant 0.044715 : f32

    // bf16(x): IREE
    %xb_init = tensor.empty() : tensor<8192x1024xbf16>
    %xb = linalg.generic {indexing_maps = [#rc, #rc], iterator_types = ["parallel", "parallel"]}
        ins(%x : tensor<8192x1024xf32>) outs(%xb_init : tensor<8192x1024xbf16>) {
    ^bb0(%v: f32, %o: bf16):
      %t = arith.truncf %v : f32 to bf16
      linalg.yield %t : bf16
    } -> tensor<8192x1024xbf16>

    // a1 = bf16(x) @ W1: hand-written GEMM
    %xb_dyn = tensor.cast %xb : tensor<8192x1024xbf16> to tensor<?x?xbf16>
    %w1_dyn = tensor.cast %w1 : tensor<1024x4096xbf16> to tensor<?x?xbf16>
    %a1_dyn = func.call @gemm.gemm_bf16(%xb_dyn, %w1_dyn) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xf32>
    %a1 = tensor.cast %a1_dyn : tensor<?x?xf32> to tensor<8192x4096xf32>

    // h = bf16(gelu_tanh(a1 + b1)): IREE, one elementwise dispatch (as in the codegen program)
    %h_init = tensor.empty() : tensor<8192x4096xbf16>
    %h = linalg.generic {indexing_maps = [#rc, #c, #rc], iterator_types = ["parallel", "parallel"]}
        ins(%a1, %b1 : tensor<8192x4096xf32>, tensor<4096xf32>) outs(%h_init : tensor<8192x4096xbf16>) {
    ^bb0(%a: f32, %b: f32, %o: bf16):
      %v = arith.addf %a, %b : f32
      %v2 = arith.mulf %v, %v : f32
      %v3 = arith.mulf %v2, %v : f32
      %cv3 = arith.mulf %gelu_c, %v3 : f32
      %inner = arith.addf %v, %cv3 : f32
      %u = arith.mulf %sqrt_2_over_pi, %inner : f32
      %th = math.tanh %u : f32
      %one_th = arith.addf %one, %th : f32
      %hv = arith.mulf %half, %v : f32
      %g = arith.mulf %hv, %one_th : f32
      %gb = arith.truncf %g : f32 to bf16
      linalg.yield %gb : bf16
    } -> tensor<8192x4096xbf16>

    // a2 = h @ W2: hand-written GEMM; y = a2 + b2 + x: IREE
    %h_dyn = tensor.cast %h : tensor<8192x4096xbf16> to tensor<?x?xbf16>
    %w2_dyn = tensor.cast %w2 : tensor<4096x1024xbf16> to tensor<?x?xbf16>
    %a2_dyn = func.call @gemm.gemm_bf16(%h_dyn, %w2_dyn) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xf32>
    %a2 = tensor.cast %a2_dyn : tensor<?x?xf32> to tensor<8192x1024xf32>
    %y_init = tensor.empty() : tensor<8192x1024xf32>
    %y = linalg.generic {indexing_maps = [#rc, #c, #rc, #rc], iterator_types = ["parallel", "parallel"]}
        ins(%a2, %b2, %x : tensor<8192x1024xf32>, tensor<1024xf32>, tensor<8192x1024xf32>) outs(%y_init : tensor<8192x1024xf32>) {
    ^bb0(%a: f32, %b: f32, %r: f32, %o: f32):
      %s = arith.addf %a, %b : f32
      %t = arith.addf %s, %r : f32
      linalg.yield %t : f32
    } -> tensor<8192x1024xf32>

    // z = layernorm(y) * gamma + beta, out = softmax(z): hand-written kernels (a warp per row)
    %y_dyn = tensor.cast %y : tensor<8192x1024xf32> to tensor<?x?xf32>
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
