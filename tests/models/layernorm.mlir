// LayerNorm over the last dim as torch's decomposition imports it (one op per linalg.generic):
// mean, centered, biased variance, + eps, rsqrt, * weight + bias. @ln_eps5 uses eps = 1e-5,
// @ln_eps6 eps = 1e-6, @ln_bf16 computes in bf16 throughout. Test model for iree-dispatch compile.
func.func @ln_eps5(%x: tensor<4x8x96xf32>, %w: tensor<96xf32>, %b: tensor<96xf32>) -> tensor<4x8x96xf32> {
  %zero = arith.constant 0.0 : f32
  %n = arith.constant 96.0 : f32
  %eps = arith.constant 1.0e-05 : f32
  %ex = tensor.empty() : tensor<4x8x96xf32>
  %er = tensor.empty() : tensor<4x8x1xf32>
  %fr = linalg.fill ins(%zero : f32) outs(%er : tensor<4x8x1xf32>) -> tensor<4x8x1xf32>
  %sum = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x : tensor<4x8x96xf32>) outs(%fr : tensor<4x8x1xf32>) {
  ^bb0(%a0: f32, %o: f32):
    %y = arith.addf %a0, %o : f32
    linalg.yield %y : f32
  } -> tensor<4x8x1xf32>
  %mean = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%sum : tensor<4x8x1xf32>) outs(%er : tensor<4x8x1xf32>) {
  ^bb0(%a0: f32, %o: f32):
    %y = arith.divf %a0, %n : f32
    linalg.yield %y : f32
  } -> tensor<4x8x1xf32>
  %mean2 = tensor.collapse_shape %mean [[0], [1, 2]] : tensor<4x8x1xf32> into tensor<4x8xf32>
  %meanb = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%mean2 : tensor<4x8xf32>) outs(%ex : tensor<4x8x96xf32>) {
  ^bb0(%a0: f32, %o: f32):
    linalg.yield %a0 : f32
  } -> tensor<4x8x96xf32>
  %d = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %meanb : tensor<4x8x96xf32>, tensor<4x8x96xf32>) outs(%ex : tensor<4x8x96xf32>) {
  ^bb0(%a0: f32, %a1: f32, %o: f32):
    %y = arith.subf %a0, %a1 : f32
    linalg.yield %y : f32
  } -> tensor<4x8x96xf32>
  %sq = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%d, %d : tensor<4x8x96xf32>, tensor<4x8x96xf32>) outs(%ex : tensor<4x8x96xf32>) {
  ^bb0(%a0: f32, %a1: f32, %o: f32):
    %y = arith.mulf %a0, %a1 : f32
    linalg.yield %y : f32
  } -> tensor<4x8x96xf32>
  %ss = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%sq : tensor<4x8x96xf32>) outs(%fr : tensor<4x8x1xf32>) {
  ^bb0(%a0: f32, %o: f32):
    %y = arith.addf %a0, %o : f32
    linalg.yield %y : f32
  } -> tensor<4x8x1xf32>
  %var = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%ss : tensor<4x8x1xf32>) outs(%er : tensor<4x8x1xf32>) {
  ^bb0(%a0: f32, %o: f32):
    %y = arith.divf %a0, %n : f32
    linalg.yield %y : f32
  } -> tensor<4x8x1xf32>
  %ve = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%var : tensor<4x8x1xf32>) outs(%er : tensor<4x8x1xf32>) {
  ^bb0(%a0: f32, %o: f32):
    %y = arith.addf %a0, %eps : f32
    linalg.yield %y : f32
  } -> tensor<4x8x1xf32>
  %rs = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%ve : tensor<4x8x1xf32>) outs(%er : tensor<4x8x1xf32>) {
  ^bb0(%a0: f32, %o: f32):
    %y = math.rsqrt %a0 : f32
    linalg.yield %y : f32
  } -> tensor<4x8x1xf32>
  %rs2 = tensor.collapse_shape %rs [[0], [1, 2]] : tensor<4x8x1xf32> into tensor<4x8xf32>
  %rsb = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%rs2 : tensor<4x8xf32>) outs(%ex : tensor<4x8x96xf32>) {
  ^bb0(%a0: f32, %o: f32):
    linalg.yield %a0 : f32
  } -> tensor<4x8x96xf32>
  %nrm = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%d, %rsb : tensor<4x8x96xf32>, tensor<4x8x96xf32>) outs(%ex : tensor<4x8x96xf32>) {
  ^bb0(%a0: f32, %a1: f32, %o: f32):
    %y = arith.mulf %a0, %a1 : f32
    linalg.yield %y : f32
  } -> tensor<4x8x96xf32>
  %sc = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%nrm, %w : tensor<4x8x96xf32>, tensor<96xf32>) outs(%ex : tensor<4x8x96xf32>) {
  ^bb0(%a0: f32, %a1: f32, %o: f32):
    %y = arith.mulf %a0, %a1 : f32
    linalg.yield %y : f32
  } -> tensor<4x8x96xf32>
  %out = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%sc, %b : tensor<4x8x96xf32>, tensor<96xf32>) outs(%ex : tensor<4x8x96xf32>) {
  ^bb0(%a0: f32, %a1: f32, %o: f32):
    %y = arith.addf %a0, %a1 : f32
    linalg.yield %y : f32
  } -> tensor<4x8x96xf32>
  return %out : tensor<4x8x96xf32>
}
func.func @ln_eps6(%x: tensor<4x8x96xf32>, %w: tensor<96xf32>, %b: tensor<96xf32>) -> tensor<4x8x96xf32> {
  %zero = arith.constant 0.0 : f32
  %n = arith.constant 96.0 : f32
  %eps = arith.constant 1.0e-06 : f32
  %ex = tensor.empty() : tensor<4x8x96xf32>
  %er = tensor.empty() : tensor<4x8x1xf32>
  %fr = linalg.fill ins(%zero : f32) outs(%er : tensor<4x8x1xf32>) -> tensor<4x8x1xf32>
  %sum = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x : tensor<4x8x96xf32>) outs(%fr : tensor<4x8x1xf32>) {
  ^bb0(%a0: f32, %o: f32):
    %y = arith.addf %a0, %o : f32
    linalg.yield %y : f32
  } -> tensor<4x8x1xf32>
  %mean = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%sum : tensor<4x8x1xf32>) outs(%er : tensor<4x8x1xf32>) {
  ^bb0(%a0: f32, %o: f32):
    %y = arith.divf %a0, %n : f32
    linalg.yield %y : f32
  } -> tensor<4x8x1xf32>
  %mean2 = tensor.collapse_shape %mean [[0], [1, 2]] : tensor<4x8x1xf32> into tensor<4x8xf32>
  %meanb = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%mean2 : tensor<4x8xf32>) outs(%ex : tensor<4x8x96xf32>) {
  ^bb0(%a0: f32, %o: f32):
    linalg.yield %a0 : f32
  } -> tensor<4x8x96xf32>
  %d = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %meanb : tensor<4x8x96xf32>, tensor<4x8x96xf32>) outs(%ex : tensor<4x8x96xf32>) {
  ^bb0(%a0: f32, %a1: f32, %o: f32):
    %y = arith.subf %a0, %a1 : f32
    linalg.yield %y : f32
  } -> tensor<4x8x96xf32>
  %sq = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%d, %d : tensor<4x8x96xf32>, tensor<4x8x96xf32>) outs(%ex : tensor<4x8x96xf32>) {
  ^bb0(%a0: f32, %a1: f32, %o: f32):
    %y = arith.mulf %a0, %a1 : f32
    linalg.yield %y : f32
  } -> tensor<4x8x96xf32>
  %ss = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%sq : tensor<4x8x96xf32>) outs(%fr : tensor<4x8x1xf32>) {
  ^bb0(%a0: f32, %o: f32):
    %y = arith.addf %a0, %o : f32
    linalg.yield %y : f32
  } -> tensor<4x8x1xf32>
  %var = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%ss : tensor<4x8x1xf32>) outs(%er : tensor<4x8x1xf32>) {
  ^bb0(%a0: f32, %o: f32):
    %y = arith.divf %a0, %n : f32
    linalg.yield %y : f32
  } -> tensor<4x8x1xf32>
  %ve = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%var : tensor<4x8x1xf32>) outs(%er : tensor<4x8x1xf32>) {
  ^bb0(%a0: f32, %o: f32):
    %y = arith.addf %a0, %eps : f32
    linalg.yield %y : f32
  } -> tensor<4x8x1xf32>
  %rs = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%ve : tensor<4x8x1xf32>) outs(%er : tensor<4x8x1xf32>) {
  ^bb0(%a0: f32, %o: f32):
    %y = math.rsqrt %a0 : f32
    linalg.yield %y : f32
  } -> tensor<4x8x1xf32>
  %rs2 = tensor.collapse_shape %rs [[0], [1, 2]] : tensor<4x8x1xf32> into tensor<4x8xf32>
  %rsb = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%rs2 : tensor<4x8xf32>) outs(%ex : tensor<4x8x96xf32>) {
  ^bb0(%a0: f32, %o: f32):
    linalg.yield %a0 : f32
  } -> tensor<4x8x96xf32>
  %nrm = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%d, %rsb : tensor<4x8x96xf32>, tensor<4x8x96xf32>) outs(%ex : tensor<4x8x96xf32>) {
  ^bb0(%a0: f32, %a1: f32, %o: f32):
    %y = arith.mulf %a0, %a1 : f32
    linalg.yield %y : f32
  } -> tensor<4x8x96xf32>
  %sc = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%nrm, %w : tensor<4x8x96xf32>, tensor<96xf32>) outs(%ex : tensor<4x8x96xf32>) {
  ^bb0(%a0: f32, %a1: f32, %o: f32):
    %y = arith.mulf %a0, %a1 : f32
    linalg.yield %y : f32
  } -> tensor<4x8x96xf32>
  %out = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%sc, %b : tensor<4x8x96xf32>, tensor<96xf32>) outs(%ex : tensor<4x8x96xf32>) {
  ^bb0(%a0: f32, %a1: f32, %o: f32):
    %y = arith.addf %a0, %a1 : f32
    linalg.yield %y : f32
  } -> tensor<4x8x96xf32>
  return %out : tensor<4x8x96xf32>
}
func.func @ln_bf16(%x: tensor<4x8x96xbf16>, %w: tensor<96xbf16>, %b: tensor<96xbf16>) -> tensor<4x8x96xbf16> {
  %zero = arith.constant 0.0 : bf16
  %n = arith.constant 96.0 : bf16
  %eps = arith.constant 1.0e-05 : bf16
  %ex = tensor.empty() : tensor<4x8x96xbf16>
  %er = tensor.empty() : tensor<4x8x1xbf16>
  %fr = linalg.fill ins(%zero : bf16) outs(%er : tensor<4x8x1xbf16>) -> tensor<4x8x1xbf16>
  %sum = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x : tensor<4x8x96xbf16>) outs(%fr : tensor<4x8x1xbf16>) {
  ^bb0(%a0: bf16, %o: bf16):
    %y = arith.addf %a0, %o : bf16
    linalg.yield %y : bf16
  } -> tensor<4x8x1xbf16>
  %mean = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%sum : tensor<4x8x1xbf16>) outs(%er : tensor<4x8x1xbf16>) {
  ^bb0(%a0: bf16, %o: bf16):
    %y = arith.divf %a0, %n : bf16
    linalg.yield %y : bf16
  } -> tensor<4x8x1xbf16>
  %mean2 = tensor.collapse_shape %mean [[0], [1, 2]] : tensor<4x8x1xbf16> into tensor<4x8xbf16>
  %meanb = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%mean2 : tensor<4x8xbf16>) outs(%ex : tensor<4x8x96xbf16>) {
  ^bb0(%a0: bf16, %o: bf16):
    linalg.yield %a0 : bf16
  } -> tensor<4x8x96xbf16>
  %d = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x, %meanb : tensor<4x8x96xbf16>, tensor<4x8x96xbf16>) outs(%ex : tensor<4x8x96xbf16>) {
  ^bb0(%a0: bf16, %a1: bf16, %o: bf16):
    %y = arith.subf %a0, %a1 : bf16
    linalg.yield %y : bf16
  } -> tensor<4x8x96xbf16>
  %sq = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%d, %d : tensor<4x8x96xbf16>, tensor<4x8x96xbf16>) outs(%ex : tensor<4x8x96xbf16>) {
  ^bb0(%a0: bf16, %a1: bf16, %o: bf16):
    %y = arith.mulf %a0, %a1 : bf16
    linalg.yield %y : bf16
  } -> tensor<4x8x96xbf16>
  %ss = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%sq : tensor<4x8x96xbf16>) outs(%fr : tensor<4x8x1xbf16>) {
  ^bb0(%a0: bf16, %o: bf16):
    %y = arith.addf %a0, %o : bf16
    linalg.yield %y : bf16
  } -> tensor<4x8x1xbf16>
  %var = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%ss : tensor<4x8x1xbf16>) outs(%er : tensor<4x8x1xbf16>) {
  ^bb0(%a0: bf16, %o: bf16):
    %y = arith.divf %a0, %n : bf16
    linalg.yield %y : bf16
  } -> tensor<4x8x1xbf16>
  %ve = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%var : tensor<4x8x1xbf16>) outs(%er : tensor<4x8x1xbf16>) {
  ^bb0(%a0: bf16, %o: bf16):
    %y = arith.addf %a0, %eps : bf16
    linalg.yield %y : bf16
  } -> tensor<4x8x1xbf16>
  %rs = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%ve : tensor<4x8x1xbf16>) outs(%er : tensor<4x8x1xbf16>) {
  ^bb0(%a0: bf16, %o: bf16):
    %y = math.rsqrt %a0 : bf16
    linalg.yield %y : bf16
  } -> tensor<4x8x1xbf16>
  %rs2 = tensor.collapse_shape %rs [[0], [1, 2]] : tensor<4x8x1xbf16> into tensor<4x8xbf16>
  %rsb = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%rs2 : tensor<4x8xbf16>) outs(%ex : tensor<4x8x96xbf16>) {
  ^bb0(%a0: bf16, %o: bf16):
    linalg.yield %a0 : bf16
  } -> tensor<4x8x96xbf16>
  %nrm = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%d, %rsb : tensor<4x8x96xbf16>, tensor<4x8x96xbf16>) outs(%ex : tensor<4x8x96xbf16>) {
  ^bb0(%a0: bf16, %a1: bf16, %o: bf16):
    %y = arith.mulf %a0, %a1 : bf16
    linalg.yield %y : bf16
  } -> tensor<4x8x96xbf16>
  %sc = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%nrm, %w : tensor<4x8x96xbf16>, tensor<96xbf16>) outs(%ex : tensor<4x8x96xbf16>) {
  ^bb0(%a0: bf16, %a1: bf16, %o: bf16):
    %y = arith.mulf %a0, %a1 : bf16
    linalg.yield %y : bf16
  } -> tensor<4x8x96xbf16>
  %out = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%sc, %b : tensor<4x8x96xbf16>, tensor<96xbf16>) outs(%ex : tensor<4x8x96xbf16>) {
  ^bb0(%a0: bf16, %a1: bf16, %o: bf16):
    %y = arith.addf %a0, %a1 : bf16
    linalg.yield %y : bf16
  } -> tensor<4x8x96xbf16>
  return %out : tensor<4x8x96xbf16>
}
