// The ops of mlir/transformer_block_codegen.mlir one at a time, each a function IREE generates
// alone (no fusion with its neighbours), at the block's sizes (T = 8192, D = 1024, H = 4096):
// benchmarks/transformer_block.py times each against the hand-written kernel for the same op
// (kernels/transformer.toml, kernels/gemm.toml). Same code as in the block, see there.
//   iree-compile --iree-hal-target-device=cuda --iree-cuda-target=sm_80 \
//       mlir/transformer_ops_codegen.mlir -o build/transformer_ops_codegen.vmfb
#rc = affine_map<(r, c) -> (r, c)>
#c = affine_map<(r, c) -> (c)>
#r = affine_map<(r, c) -> (r)>
module @transformer_ops_codegen {
  // gelu_tanh(a + bias), f32 in and out (the kernel's function; in the block IREE also fuses
  // the bf16 cast and the matmul in front of it)
  func.func @bias_gelu(%a1: tensor<8192x4096xf32>, %b1: tensor<4096xf32>) -> tensor<8192x4096xf32> {
    %half = arith.constant 0.5 : f32
    %one = arith.constant 1.0 : f32
    %sqrt_2_over_pi = arith.constant 0.7978845608028654 : f32
    %gelu_c = arith.constant 0.044715 : f32
    %g_init = tensor.empty() : tensor<8192x4096xf32>
    %g = linalg.generic {indexing_maps = [#rc, #c, #rc], iterator_types = ["parallel", "parallel"]}
        ins(%a1, %b1 : tensor<8192x4096xf32>, tensor<4096xf32>) outs(%g_init : tensor<8192x4096xf32>) {
    ^bb0(%a: f32, %b: f32, %o: f32):
      %v = arith.addf %a, %b : f32
      %v2 = arith.mulf %v, %v : f32
      %v3 = arith.mulf %v2, %v : f32
      %cv3 = arith.mulf %gelu_c, %v3 : f32
      %inner = arith.addf %v, %cv3 : f32
      %u = arith.mulf %sqrt_2_over_pi, %inner : f32
      %th = math.tanh %u : f32
      %one_th = arith.addf %one, %th : f32
      %hv = arith.mulf %half, %v : f32
      %gv = arith.mulf %hv, %one_th : f32
      linalg.yield %gv : f32
    } -> tensor<8192x4096xf32>
    return %g : tensor<8192x4096xf32>
  }

  // bf16(gelu_tanh(a + bias)), f32 in, bf16 out: what IREE generates for the block's bias + GELU
  // + cast when the matmul in front of it is not its own (mlir/transformer_block_mixed_gemm_fused.mlir)
  func.func @bias_gelu_bf16(%a1: tensor<8192x4096xf32>, %b1: tensor<4096xf32>) -> tensor<8192x4096xbf16> {
    %half = arith.constant 0.5 : f32
    %one = arith.constant 1.0 : f32
    %sqrt_2_over_pi = arith.constant 0.7978845608028654 : f32
    %gelu_c = arith.constant 0.044715 : f32
    %g_init = tensor.empty() : tensor<8192x4096xbf16>
    %g = linalg.generic {indexing_maps = [#rc, #c, #rc], iterator_types = ["parallel", "parallel"]}
        ins(%a1, %b1 : tensor<8192x4096xf32>, tensor<4096xf32>) outs(%g_init : tensor<8192x4096xbf16>) {
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
      %gv = arith.mulf %hv, %one_th : f32
      %gb = arith.truncf %gv : f32 to bf16
      linalg.yield %gb : bf16
    } -> tensor<8192x4096xbf16>
    return %g : tensor<8192x4096xbf16>
  }

  func.func @layernorm(%y: tensor<8192x1024xf32>, %gamma: tensor<1024xf32>, %beta: tensor<1024xf32>) -> tensor<8192x1024xf32> {
    %zero = arith.constant 0.0 : f32
    %inv_d = arith.constant 9.765625e-04 : f32  // 1 / 1024, exact
    %eps = arith.constant 1.0e-05 : f32
    %row_init = tensor.empty() : tensor<8192xf32>
    %row_zero = linalg.fill ins(%zero : f32) outs(%row_init : tensor<8192xf32>) -> tensor<8192xf32>
    %sum = linalg.generic {indexing_maps = [#rc, #r], iterator_types = ["parallel", "reduction"]}
        ins(%y : tensor<8192x1024xf32>) outs(%row_zero : tensor<8192xf32>) {
    ^bb0(%v: f32, %acc: f32):
      %t = arith.addf %acc, %v : f32
      linalg.yield %t : f32
    } -> tensor<8192xf32>
    %sqdev = linalg.generic {indexing_maps = [#rc, #r, #r], iterator_types = ["parallel", "reduction"]}
        ins(%y, %sum : tensor<8192x1024xf32>, tensor<8192xf32>) outs(%row_zero : tensor<8192xf32>) {
    ^bb0(%v: f32, %s: f32, %acc: f32):
      %mean = arith.mulf %s, %inv_d : f32
      %d = arith.subf %v, %mean : f32
      %d2 = arith.mulf %d, %d : f32
      %t = arith.addf %acc, %d2 : f32
      linalg.yield %t : f32
    } -> tensor<8192xf32>
    %z_init = tensor.empty() : tensor<8192x1024xf32>
    %z = linalg.generic {indexing_maps = [#rc, #r, #r, #c, #c, #rc], iterator_types = ["parallel", "parallel"]}
        ins(%y, %sum, %sqdev, %gamma, %beta : tensor<8192x1024xf32>, tensor<8192xf32>, tensor<8192xf32>, tensor<1024xf32>, tensor<1024xf32>)
        outs(%z_init : tensor<8192x1024xf32>) {
    ^bb0(%v: f32, %s: f32, %q: f32, %g: f32, %b: f32, %o: f32):
      %mean = arith.mulf %s, %inv_d : f32
      %var = arith.mulf %q, %inv_d : f32
      %ve = arith.addf %var, %eps : f32
      %rstd = math.rsqrt %ve : f32
      %d = arith.subf %v, %mean : f32
      %n = arith.mulf %d, %rstd : f32
      %ng = arith.mulf %n, %g : f32
      %t = arith.addf %ng, %b : f32
      linalg.yield %t : f32
    } -> tensor<8192x1024xf32>
    return %z : tensor<8192x1024xf32>
  }

  func.func @softmax(%z: tensor<8192x1024xf32>) -> tensor<8192x1024xf32> {
    %out_init = tensor.empty() : tensor<8192x1024xf32>
    %out = linalg.softmax dimension(1) ins(%z : tensor<8192x1024xf32>) outs(%out_init : tensor<8192x1024xf32>) -> tensor<8192x1024xf32>
    return %out : tensor<8192x1024xf32>
  }

  // [T, D] @ [D, H] and [T, H] @ [H, D], bf16 x bf16 -> f32
  func.func @matmul_up(%a: tensor<8192x1024xbf16>, %b: tensor<1024x4096xbf16>) -> tensor<8192x4096xf32> {
    %zero = arith.constant 0.0 : f32
    %init = tensor.empty() : tensor<8192x4096xf32>
    %acc = linalg.fill ins(%zero : f32) outs(%init : tensor<8192x4096xf32>) -> tensor<8192x4096xf32>
    %c = linalg.matmul ins(%a, %b : tensor<8192x1024xbf16>, tensor<1024x4096xbf16>) outs(%acc : tensor<8192x4096xf32>) -> tensor<8192x4096xf32>
    return %c : tensor<8192x4096xf32>
  }

  func.func @matmul_down(%a: tensor<8192x4096xbf16>, %b: tensor<4096x1024xbf16>) -> tensor<8192x1024xf32> {
    %zero = arith.constant 0.0 : f32
    %init = tensor.empty() : tensor<8192x1024xf32>
    %acc = linalg.fill ins(%zero : f32) outs(%init : tensor<8192x1024xf32>) -> tensor<8192x1024xf32>
    %c = linalg.matmul ins(%a, %b : tensor<8192x4096xbf16>, tensor<4096x1024xbf16>) outs(%acc : tensor<8192x1024xf32>) -> tensor<8192x1024xf32>
    return %c : tensor<8192x1024xf32>
  }
}
