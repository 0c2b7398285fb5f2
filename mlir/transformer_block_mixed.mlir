// The transformer block of mlir/transformer_block_codegen.mlir (same function, same sizes:
// T = 8192, D = 1024, H = 4096), with hand-written kernels for the ops that are not matmuls:
// bias + GELU with the bf16 cast of its result (bias_gelu_f32_bf16: f32 in, bf16 out), LayerNorm
// and softmax (module `transformer`, kernels/transformer.toml). IREE generates the matmuls, the
// bf16 cast of x and the residual add (which it fuses into the second matmul).
//
//   iree-dispatch build kernels/transformer.toml --program mlir/transformer_block_mixed.mlir \
//       -o build/transformer_block_mixed.vmfb
//
// The kernels' generated functions take dynamically shaped tensors; the casts to and from the
// static shapes fold away once IREE inlines them, and with them the shape checks.
#rc = affine_map<(r, c) -> (r, c)>
#c = affine_map<(r, c) -> (c)>
module @transformer_block_mixed {
  func.func private @transformer.bias_gelu_f32_bf16(tensor<?x?xf32>, tensor<?xf32>) -> tensor<?x?xbf16>
  func.func private @transformer.layernorm_warp_f32(tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, f32) -> tensor<?x?xf32>
  func.func private @transformer.softmax_warp_f32(tensor<?x?xf32>) -> tensor<?x?xf32>

  func.func @transformer_block(%x: tensor<8192x1024xf32>, %w1: tensor<1024x4096xbf16>, %b1: tensor<4096xf32>,
                               %w2: tensor<4096x1024xbf16>, %b2: tensor<1024xf32>, %gamma: tensor<1024xf32>,
                               %beta: tensor<1024xf32>) -> (tensor<8192x1024xf32>, tensor<8192x1024xf32>) {
    %zero = arith.constant 0.0 : f32
    %eps = arith.constant 1.0e-05 : f32

    // bf16(x), then a1 = bf16(x) @ W1 in f32: IREE
    %xb_init = tensor.empty() : tensor<8192x1024xbf16>
    %xb = linalg.generic {indexing_maps = [#rc, #rc], iterator_types = ["parallel", "parallel"]}
        ins(%x : tensor<8192x1024xf32>) outs(%xb_init : tensor<8192x1024xbf16>) {
    ^bb0(%v: f32, %o: bf16):
      %t = arith.truncf %v : f32 to bf16
      linalg.yield %t : bf16
    } -> tensor<8192x1024xbf16>
    %a1_init = tensor.empty() : tensor<8192x4096xf32>
    %a1_zero = linalg.fill ins(%zero : f32) outs(%a1_init : tensor<8192x4096xf32>) -> tensor<8192x4096xf32>
    %a1 = linalg.matmul ins(%xb, %w1 : tensor<8192x1024xbf16>, tensor<1024x4096xbf16>)
                        outs(%a1_zero : tensor<8192x4096xf32>) -> tensor<8192x4096xf32>

    // h = bf16(gelu_tanh(a1 + b1)): hand-written kernel, one pass (f32 in, bf16 out)
    %a1_dyn = tensor.cast %a1 : tensor<8192x4096xf32> to tensor<?x?xf32>
    %b1_dyn = tensor.cast %b1 : tensor<4096xf32> to tensor<?xf32>
    %h_dyn = func.call @transformer.bias_gelu_f32_bf16(%a1_dyn, %b1_dyn) : (tensor<?x?xf32>, tensor<?xf32>) -> tensor<?x?xbf16>
    %h = tensor.cast %h_dyn : tensor<?x?xbf16> to tensor<8192x4096xbf16>

    // y = h @ W2 + b2 + x: IREE
    %a2_init = tensor.empty() : tensor<8192x1024xf32>
    %a2_zero = linalg.fill ins(%zero : f32) outs(%a2_init : tensor<8192x1024xf32>) -> tensor<8192x1024xf32>
    %a2 = linalg.matmul ins(%h, %w2 : tensor<8192x4096xbf16>, tensor<4096x1024xbf16>)
                        outs(%a2_zero : tensor<8192x1024xf32>) -> tensor<8192x1024xf32>
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
