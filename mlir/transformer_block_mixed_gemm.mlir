// The transformer block of mlir/transformer_block_codegen.mlir (same function, same sizes:
// T = 8192, D = 1024, H = 4096), with every op except the bf16 cast of x and the residual add
// hand-written: the two matmuls by the tensor-core GEMM gemm_bf16 (module `gemm`,
// kernels/gemm.toml: wgmma on sm_90a), bias + GELU + bf16 cast, LayerNorm and softmax (module
// `transformer`, kernels/transformer.toml) as in mlir/transformer_block_mixed.mlir.
//
// The kernels come from two specs, each keeping its module name:
//   iree-dispatch build kernels/transformer.toml kernels/gemm.toml \
//       --program mlir/transformer_block_mixed_gemm.mlir -o build/transformer_block_mixed_gemm.vmfb
#rc = affine_map<(r, c) -> (r, c)>
#c = affine_map<(r, c) -> (c)>
module @transformer_block_mixed_gemm {
  func.func private @gemm.gemm_bf16(tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xf32>
  func.func private @transformer.bias_gelu_f32_bf16(tensor<?x?xf32>, tensor<?xf32>) -> tensor<?x?xbf16>
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

    // h = bf16(gelu_tanh(bf16(x) @ W1 + b1)): hand-written GEMM, then hand-written bias + GELU
    // writing bf16 (one pass)
    %xb_dyn = tensor.cast %xb : tensor<8192x1024xbf16> to tensor<?x?xbf16>
    %w1_dyn = tensor.cast %w1 : tensor<1024x4096xbf16> to tensor<?x?xbf16>
    %a1_dyn = func.call @gemm.gemm_bf16(%xb_dyn, %w1_dyn) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xf32>
    %b1_dyn = tensor.cast %b1 : tensor<4096xf32> to tensor<?xf32>
    %h_dyn = func.call @transformer.bias_gelu_f32_bf16(%a1_dyn, %b1_dyn) : (tensor<?x?xf32>, tensor<?xf32>) -> tensor<?x?xbf16>

    // a2 = h @ W2: hand-written GEMM; y = a2 + b2 + x: IREE
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
