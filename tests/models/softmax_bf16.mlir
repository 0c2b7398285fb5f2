// Softmax over the last dim of a bf16 tensor as torch imports it: widened to f32 (extf), max
// (with its argmax), x - max, exp, sum, divide, narrowed back to bf16 (truncf). Test model.
func.func @softmax_bf16(%x: tensor<2x4x16x16xbf16>) -> tensor<2x4x16x16xbf16> {
  %c0_i64 = arith.constant 0 : i64
  %cst_1 = arith.constant 0xFF800000 : f32
  %cst = arith.constant 0.000000e+00 : f32
  %41 = tensor.empty() : tensor<2x4x16x16xf32>
  %42 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%x : tensor<2x4x16x16xbf16>) outs(%41 : tensor<2x4x16x16xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %59 = arith.extf %in : bf16 to f32
    linalg.yield %59 : f32
  } -> tensor<2x4x16x16xf32>
  %43 = tensor.empty() : tensor<2x4x16xi64>
  %44 = linalg.fill ins(%c0_i64 : i64) outs(%43 : tensor<2x4x16xi64>) -> tensor<2x4x16xi64>
  %45 = tensor.empty() : tensor<2x4x16xf32>
  %46 = linalg.fill ins(%cst_1 : f32) outs(%45 : tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %47:2 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%42 : tensor<2x4x16x16xf32>) outs(%46, %44 : tensor<2x4x16xf32>, tensor<2x4x16xi64>) {
  ^bb0(%in: f32, %out: f32, %out_15: i64):
    %59 = linalg.index 3 : index
    %60 = arith.index_cast %59 : index to i64
    %61 = arith.maximumf %in, %out : f32
    %62 = arith.cmpf ogt, %in, %out : f32
    %63 = arith.select %62, %60, %out_15 : i64
    linalg.yield %61, %63 : f32, i64
  } -> (tensor<2x4x16xf32>, tensor<2x4x16xi64>)
  %expanded_14 = tensor.expand_shape %47#0 [[0], [1], [2, 3]] output_shape [2, 4, 16, 1] : tensor<2x4x16xf32> into tensor<2x4x16x1xf32>
  %48 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%42, %expanded_14 : tensor<2x4x16x16xf32>, tensor<2x4x16x1xf32>) outs(%41 : tensor<2x4x16x16xf32>) {
  ^bb0(%in: f32, %in_15: f32, %out: f32):
    %59 = arith.subf %in, %in_15 : f32
    linalg.yield %59 : f32
  } -> tensor<2x4x16x16xf32>
  %49 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%48 : tensor<2x4x16x16xf32>) outs(%41 : tensor<2x4x16x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %59 = math.exp %in : f32
    linalg.yield %59 : f32
  } -> tensor<2x4x16x16xf32>
  %50 = tensor.empty() : tensor<2x4x16x1xf32>
  %51 = linalg.fill ins(%cst : f32) outs(%50 : tensor<2x4x16x1xf32>) -> tensor<2x4x16x1xf32>
  %52 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%49 : tensor<2x4x16x16xf32>) outs(%51 : tensor<2x4x16x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    %59 = arith.addf %in, %out : f32
    linalg.yield %59 : f32
  } -> tensor<2x4x16x1xf32>
  %53 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%49, %52 : tensor<2x4x16x16xf32>, tensor<2x4x16x1xf32>) outs(%41 : tensor<2x4x16x16xf32>) {
  ^bb0(%in: f32, %in_15: f32, %out: f32):
    %59 = arith.divf %in, %in_15 : f32
    linalg.yield %59 : f32
  } -> tensor<2x4x16x16xf32>
  %54 = tensor.empty() : tensor<2x4x16x16xbf16>
  %55 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%53 : tensor<2x4x16x16xf32>) outs(%54 : tensor<2x4x16x16xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %59 = arith.truncf %in : f32 to bf16
    linalg.yield %59 : bf16
  } -> tensor<2x4x16x16xbf16>
  return %55 : tensor<2x4x16x16xbf16>
}
