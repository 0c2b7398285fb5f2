// GPT-2's attention in bf16 at IREE's input level, by hand (B = 2, S = 40, H = 2 heads of 64, E = 128):
// q, k and v sliced from one [B, S, 3E] projection result, viewed as heads and transposed to
// [B*H, S, 64] (k: [B*H, 64, S]); scores batch matmul (f32) -> bf16 -> * 0.125 -> + mask [B, 1, S, S]
// -> softmax in f32 -> bf16 -> context batch matmul (f32) -> bf16, transposed back to [B, S, E].
// @qkv is that (attention_qkv); the others are not (attention): @separate (q, k, v three tensors),
// @swapped (k and v slices swapped), @context_used (the context also returned before its
// transpose), @q_used (the transposed q also returned). Test model.
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#mask4 = affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>
#row4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>

func.func @qkv(%x2: tensor<80x384xbf16>, %mask: tensor<2x1x40x40xbf16>) -> (tensor<2x40x128xbf16>) {
  %x = tensor.expand_shape %x2 [[0, 1], [2]] output_shape [2, 40, 384] : tensor<80x384xbf16> into tensor<2x40x384xbf16>
  %sq = tensor.extract_slice %x[0, 0, 0] [2, 40, 128] [1, 1, 1] : tensor<2x40x384xbf16> to tensor<2x40x128xbf16>
  %sk = tensor.extract_slice %x[0, 0, 128] [2, 40, 128] [1, 1, 1] : tensor<2x40x384xbf16> to tensor<2x40x128xbf16>
  %sv = tensor.extract_slice %x[0, 0, 256] [2, 40, 128] [1, 1, 1] : tensor<2x40x384xbf16> to tensor<2x40x128xbf16>
  %q4 = tensor.expand_shape %sq [[0], [1], [2, 3]] output_shape [2, 40, 2, 64] : tensor<2x40x128xbf16> into tensor<2x40x2x64xbf16>
  %k4 = tensor.expand_shape %sk [[0], [1], [2, 3]] output_shape [2, 40, 2, 64] : tensor<2x40x128xbf16> into tensor<2x40x2x64xbf16>
  %v4 = tensor.expand_shape %sv [[0], [1], [2, 3]] output_shape [2, 40, 2, 64] : tensor<2x40x128xbf16> into tensor<2x40x2x64xbf16>
  %eh = tensor.empty() : tensor<2x2x40x64xbf16>
  %ekt = tensor.empty() : tensor<2x2x64x40xbf16>
  %qt = linalg.transpose ins(%q4 : tensor<2x40x2x64xbf16>) outs(%eh : tensor<2x2x40x64xbf16>) permutation = [0, 2, 1, 3]
  %ktt = linalg.transpose ins(%k4 : tensor<2x40x2x64xbf16>) outs(%ekt : tensor<2x2x64x40xbf16>) permutation = [0, 2, 3, 1]
  %vt = linalg.transpose ins(%v4 : tensor<2x40x2x64xbf16>) outs(%eh : tensor<2x2x40x64xbf16>) permutation = [0, 2, 1, 3]
  %q = tensor.collapse_shape %qt [[0, 1], [2], [3]] : tensor<2x2x40x64xbf16> into tensor<4x40x64xbf16>
  %kt = tensor.collapse_shape %ktt [[0, 1], [2], [3]] : tensor<2x2x64x40xbf16> into tensor<4x64x40xbf16>
  %v = tensor.collapse_shape %vt [[0, 1], [2], [3]] : tensor<2x2x40x64xbf16> into tensor<4x40x64xbf16>
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 1.250000e-01 : bf16
  %es = tensor.empty() : tensor<4x40x40xf32>
  %fs = linalg.fill ins(%zero : f32) outs(%es : tensor<4x40x40xf32>) -> tensor<4x40x40xf32>
  %s = linalg.batch_matmul ins(%q, %kt : tensor<4x40x64xbf16>, tensor<4x64x40xbf16>) outs(%fs : tensor<4x40x40xf32>) -> tensor<4x40x40xf32>
  %esb = tensor.empty() : tensor<4x40x40xbf16>
  %sb = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : tensor<4x40x40xf32>) outs(%esb : tensor<4x40x40xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x40x40xbf16>
  %s4 = tensor.expand_shape %sb [[0, 1], [2], [3]] output_shape [2, 2, 40, 40] : tensor<4x40x40xbf16> into tensor<2x2x40x40xbf16>
  %e4 = tensor.empty() : tensor<2x2x40x40xbf16>
  %sc = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<2x2x40x40xbf16>) outs(%e4 : tensor<2x2x40x40xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %t = arith.mulf %in, %scale : bf16
    linalg.yield %t : bf16
  } -> tensor<2x2x40x40xbf16>
  %y = linalg.generic {indexing_maps = [#id4, #mask4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sc, %mask : tensor<2x2x40x40xbf16>, tensor<2x1x40x40xbf16>) outs(%e4 : tensor<2x2x40x40xbf16>) {
  ^bb0(%in: bf16, %m: bf16, %out: bf16):
    %t = arith.addf %in, %m : bf16
    linalg.yield %t : bf16
  } -> tensor<2x2x40x40xbf16>
  %e4f = tensor.empty() : tensor<2x2x40x40xf32>
  %yf = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%y : tensor<2x2x40x40xbf16>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %t = arith.extf %in : bf16 to f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %er = tensor.empty() : tensor<2x2x40xf32>
  %fm = linalg.fill ins(%ninf : f32) outs(%er : tensor<2x2x40xf32>) -> tensor<2x2x40xf32>
  %mx = linalg.generic {indexing_maps = [#id4, #row4], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%yf : tensor<2x2x40x40xf32>) outs(%fm : tensor<2x2x40xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.maximumf %in, %out : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40xf32>
  %d = linalg.generic {indexing_maps = [#id4, #row4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%yf, %mx : tensor<2x2x40x40xf32>, tensor<2x2x40xf32>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: f32, %m: f32, %out: f32):
    %t = arith.subf %in, %m : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %ex = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%d : tensor<2x2x40x40xf32>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = math.exp %in : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %fz = linalg.fill ins(%zero : f32) outs(%er : tensor<2x2x40xf32>) -> tensor<2x2x40xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row4], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%ex : tensor<2x2x40x40xf32>) outs(%fz : tensor<2x2x40xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.addf %in, %out : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%ex, %sum : tensor<2x2x40x40xf32>, tensor<2x2x40xf32>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: f32, %n: f32, %out: f32):
    %t = arith.divf %in, %n : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %pb = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%p : tensor<2x2x40x40xf32>) outs(%e4 : tensor<2x2x40x40xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<2x2x40x40xbf16>
  %p3 = tensor.collapse_shape %pb [[0, 1], [2], [3]] : tensor<2x2x40x40xbf16> into tensor<4x40x40xbf16>
  %eo = tensor.empty() : tensor<4x40x64xf32>
  %fo = linalg.fill ins(%zero : f32) outs(%eo : tensor<4x40x64xf32>) -> tensor<4x40x64xf32>
  %o = linalg.batch_matmul ins(%p3, %v : tensor<4x40x40xbf16>, tensor<4x40x64xbf16>) outs(%fo : tensor<4x40x64xf32>) -> tensor<4x40x64xf32>
  %eob = tensor.empty() : tensor<4x40x64xbf16>
  %ob = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%o : tensor<4x40x64xf32>) outs(%eob : tensor<4x40x64xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x40x64xbf16>
  %o4 = tensor.expand_shape %ob [[0, 1], [2], [3]] output_shape [2, 2, 40, 64] : tensor<4x40x64xbf16> into tensor<2x2x40x64xbf16>
  %et = tensor.empty() : tensor<2x40x2x64xbf16>
  %ot = linalg.transpose ins(%o4 : tensor<2x2x40x64xbf16>) outs(%et : tensor<2x40x2x64xbf16>) permutation = [0, 2, 1, 3]
  %out = tensor.collapse_shape %ot [[0], [1], [2, 3]] : tensor<2x40x2x64xbf16> into tensor<2x40x128xbf16>
  return %out : tensor<2x40x128xbf16>
}

func.func @separate(%sq: tensor<2x40x128xbf16>, %sk: tensor<2x40x128xbf16>, %sv: tensor<2x40x128xbf16>, %mask: tensor<2x1x40x40xbf16>) -> (tensor<2x40x128xbf16>) {
  %q4 = tensor.expand_shape %sq [[0], [1], [2, 3]] output_shape [2, 40, 2, 64] : tensor<2x40x128xbf16> into tensor<2x40x2x64xbf16>
  %k4 = tensor.expand_shape %sk [[0], [1], [2, 3]] output_shape [2, 40, 2, 64] : tensor<2x40x128xbf16> into tensor<2x40x2x64xbf16>
  %v4 = tensor.expand_shape %sv [[0], [1], [2, 3]] output_shape [2, 40, 2, 64] : tensor<2x40x128xbf16> into tensor<2x40x2x64xbf16>
  %eh = tensor.empty() : tensor<2x2x40x64xbf16>
  %ekt = tensor.empty() : tensor<2x2x64x40xbf16>
  %qt = linalg.transpose ins(%q4 : tensor<2x40x2x64xbf16>) outs(%eh : tensor<2x2x40x64xbf16>) permutation = [0, 2, 1, 3]
  %ktt = linalg.transpose ins(%k4 : tensor<2x40x2x64xbf16>) outs(%ekt : tensor<2x2x64x40xbf16>) permutation = [0, 2, 3, 1]
  %vt = linalg.transpose ins(%v4 : tensor<2x40x2x64xbf16>) outs(%eh : tensor<2x2x40x64xbf16>) permutation = [0, 2, 1, 3]
  %q = tensor.collapse_shape %qt [[0, 1], [2], [3]] : tensor<2x2x40x64xbf16> into tensor<4x40x64xbf16>
  %kt = tensor.collapse_shape %ktt [[0, 1], [2], [3]] : tensor<2x2x64x40xbf16> into tensor<4x64x40xbf16>
  %v = tensor.collapse_shape %vt [[0, 1], [2], [3]] : tensor<2x2x40x64xbf16> into tensor<4x40x64xbf16>
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 1.250000e-01 : bf16
  %es = tensor.empty() : tensor<4x40x40xf32>
  %fs = linalg.fill ins(%zero : f32) outs(%es : tensor<4x40x40xf32>) -> tensor<4x40x40xf32>
  %s = linalg.batch_matmul ins(%q, %kt : tensor<4x40x64xbf16>, tensor<4x64x40xbf16>) outs(%fs : tensor<4x40x40xf32>) -> tensor<4x40x40xf32>
  %esb = tensor.empty() : tensor<4x40x40xbf16>
  %sb = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : tensor<4x40x40xf32>) outs(%esb : tensor<4x40x40xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x40x40xbf16>
  %s4 = tensor.expand_shape %sb [[0, 1], [2], [3]] output_shape [2, 2, 40, 40] : tensor<4x40x40xbf16> into tensor<2x2x40x40xbf16>
  %e4 = tensor.empty() : tensor<2x2x40x40xbf16>
  %sc = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<2x2x40x40xbf16>) outs(%e4 : tensor<2x2x40x40xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %t = arith.mulf %in, %scale : bf16
    linalg.yield %t : bf16
  } -> tensor<2x2x40x40xbf16>
  %y = linalg.generic {indexing_maps = [#id4, #mask4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sc, %mask : tensor<2x2x40x40xbf16>, tensor<2x1x40x40xbf16>) outs(%e4 : tensor<2x2x40x40xbf16>) {
  ^bb0(%in: bf16, %m: bf16, %out: bf16):
    %t = arith.addf %in, %m : bf16
    linalg.yield %t : bf16
  } -> tensor<2x2x40x40xbf16>
  %e4f = tensor.empty() : tensor<2x2x40x40xf32>
  %yf = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%y : tensor<2x2x40x40xbf16>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %t = arith.extf %in : bf16 to f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %er = tensor.empty() : tensor<2x2x40xf32>
  %fm = linalg.fill ins(%ninf : f32) outs(%er : tensor<2x2x40xf32>) -> tensor<2x2x40xf32>
  %mx = linalg.generic {indexing_maps = [#id4, #row4], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%yf : tensor<2x2x40x40xf32>) outs(%fm : tensor<2x2x40xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.maximumf %in, %out : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40xf32>
  %d = linalg.generic {indexing_maps = [#id4, #row4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%yf, %mx : tensor<2x2x40x40xf32>, tensor<2x2x40xf32>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: f32, %m: f32, %out: f32):
    %t = arith.subf %in, %m : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %ex = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%d : tensor<2x2x40x40xf32>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = math.exp %in : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %fz = linalg.fill ins(%zero : f32) outs(%er : tensor<2x2x40xf32>) -> tensor<2x2x40xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row4], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%ex : tensor<2x2x40x40xf32>) outs(%fz : tensor<2x2x40xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.addf %in, %out : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%ex, %sum : tensor<2x2x40x40xf32>, tensor<2x2x40xf32>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: f32, %n: f32, %out: f32):
    %t = arith.divf %in, %n : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %pb = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%p : tensor<2x2x40x40xf32>) outs(%e4 : tensor<2x2x40x40xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<2x2x40x40xbf16>
  %p3 = tensor.collapse_shape %pb [[0, 1], [2], [3]] : tensor<2x2x40x40xbf16> into tensor<4x40x40xbf16>
  %eo = tensor.empty() : tensor<4x40x64xf32>
  %fo = linalg.fill ins(%zero : f32) outs(%eo : tensor<4x40x64xf32>) -> tensor<4x40x64xf32>
  %o = linalg.batch_matmul ins(%p3, %v : tensor<4x40x40xbf16>, tensor<4x40x64xbf16>) outs(%fo : tensor<4x40x64xf32>) -> tensor<4x40x64xf32>
  %eob = tensor.empty() : tensor<4x40x64xbf16>
  %ob = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%o : tensor<4x40x64xf32>) outs(%eob : tensor<4x40x64xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x40x64xbf16>
  %o4 = tensor.expand_shape %ob [[0, 1], [2], [3]] output_shape [2, 2, 40, 64] : tensor<4x40x64xbf16> into tensor<2x2x40x64xbf16>
  %et = tensor.empty() : tensor<2x40x2x64xbf16>
  %ot = linalg.transpose ins(%o4 : tensor<2x2x40x64xbf16>) outs(%et : tensor<2x40x2x64xbf16>) permutation = [0, 2, 1, 3]
  %out = tensor.collapse_shape %ot [[0], [1], [2, 3]] : tensor<2x40x2x64xbf16> into tensor<2x40x128xbf16>
  return %out : tensor<2x40x128xbf16>
}

func.func @swapped(%x2: tensor<80x384xbf16>, %mask: tensor<2x1x40x40xbf16>) -> (tensor<2x40x128xbf16>) {
  %x = tensor.expand_shape %x2 [[0, 1], [2]] output_shape [2, 40, 384] : tensor<80x384xbf16> into tensor<2x40x384xbf16>
  %sq = tensor.extract_slice %x[0, 0, 0] [2, 40, 128] [1, 1, 1] : tensor<2x40x384xbf16> to tensor<2x40x128xbf16>
  %sk = tensor.extract_slice %x[0, 0, 256] [2, 40, 128] [1, 1, 1] : tensor<2x40x384xbf16> to tensor<2x40x128xbf16>
  %sv = tensor.extract_slice %x[0, 0, 128] [2, 40, 128] [1, 1, 1] : tensor<2x40x384xbf16> to tensor<2x40x128xbf16>
  %q4 = tensor.expand_shape %sq [[0], [1], [2, 3]] output_shape [2, 40, 2, 64] : tensor<2x40x128xbf16> into tensor<2x40x2x64xbf16>
  %k4 = tensor.expand_shape %sk [[0], [1], [2, 3]] output_shape [2, 40, 2, 64] : tensor<2x40x128xbf16> into tensor<2x40x2x64xbf16>
  %v4 = tensor.expand_shape %sv [[0], [1], [2, 3]] output_shape [2, 40, 2, 64] : tensor<2x40x128xbf16> into tensor<2x40x2x64xbf16>
  %eh = tensor.empty() : tensor<2x2x40x64xbf16>
  %ekt = tensor.empty() : tensor<2x2x64x40xbf16>
  %qt = linalg.transpose ins(%q4 : tensor<2x40x2x64xbf16>) outs(%eh : tensor<2x2x40x64xbf16>) permutation = [0, 2, 1, 3]
  %ktt = linalg.transpose ins(%k4 : tensor<2x40x2x64xbf16>) outs(%ekt : tensor<2x2x64x40xbf16>) permutation = [0, 2, 3, 1]
  %vt = linalg.transpose ins(%v4 : tensor<2x40x2x64xbf16>) outs(%eh : tensor<2x2x40x64xbf16>) permutation = [0, 2, 1, 3]
  %q = tensor.collapse_shape %qt [[0, 1], [2], [3]] : tensor<2x2x40x64xbf16> into tensor<4x40x64xbf16>
  %kt = tensor.collapse_shape %ktt [[0, 1], [2], [3]] : tensor<2x2x64x40xbf16> into tensor<4x64x40xbf16>
  %v = tensor.collapse_shape %vt [[0, 1], [2], [3]] : tensor<2x2x40x64xbf16> into tensor<4x40x64xbf16>
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 1.250000e-01 : bf16
  %es = tensor.empty() : tensor<4x40x40xf32>
  %fs = linalg.fill ins(%zero : f32) outs(%es : tensor<4x40x40xf32>) -> tensor<4x40x40xf32>
  %s = linalg.batch_matmul ins(%q, %kt : tensor<4x40x64xbf16>, tensor<4x64x40xbf16>) outs(%fs : tensor<4x40x40xf32>) -> tensor<4x40x40xf32>
  %esb = tensor.empty() : tensor<4x40x40xbf16>
  %sb = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : tensor<4x40x40xf32>) outs(%esb : tensor<4x40x40xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x40x40xbf16>
  %s4 = tensor.expand_shape %sb [[0, 1], [2], [3]] output_shape [2, 2, 40, 40] : tensor<4x40x40xbf16> into tensor<2x2x40x40xbf16>
  %e4 = tensor.empty() : tensor<2x2x40x40xbf16>
  %sc = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<2x2x40x40xbf16>) outs(%e4 : tensor<2x2x40x40xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %t = arith.mulf %in, %scale : bf16
    linalg.yield %t : bf16
  } -> tensor<2x2x40x40xbf16>
  %y = linalg.generic {indexing_maps = [#id4, #mask4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sc, %mask : tensor<2x2x40x40xbf16>, tensor<2x1x40x40xbf16>) outs(%e4 : tensor<2x2x40x40xbf16>) {
  ^bb0(%in: bf16, %m: bf16, %out: bf16):
    %t = arith.addf %in, %m : bf16
    linalg.yield %t : bf16
  } -> tensor<2x2x40x40xbf16>
  %e4f = tensor.empty() : tensor<2x2x40x40xf32>
  %yf = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%y : tensor<2x2x40x40xbf16>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %t = arith.extf %in : bf16 to f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %er = tensor.empty() : tensor<2x2x40xf32>
  %fm = linalg.fill ins(%ninf : f32) outs(%er : tensor<2x2x40xf32>) -> tensor<2x2x40xf32>
  %mx = linalg.generic {indexing_maps = [#id4, #row4], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%yf : tensor<2x2x40x40xf32>) outs(%fm : tensor<2x2x40xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.maximumf %in, %out : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40xf32>
  %d = linalg.generic {indexing_maps = [#id4, #row4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%yf, %mx : tensor<2x2x40x40xf32>, tensor<2x2x40xf32>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: f32, %m: f32, %out: f32):
    %t = arith.subf %in, %m : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %ex = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%d : tensor<2x2x40x40xf32>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = math.exp %in : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %fz = linalg.fill ins(%zero : f32) outs(%er : tensor<2x2x40xf32>) -> tensor<2x2x40xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row4], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%ex : tensor<2x2x40x40xf32>) outs(%fz : tensor<2x2x40xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.addf %in, %out : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%ex, %sum : tensor<2x2x40x40xf32>, tensor<2x2x40xf32>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: f32, %n: f32, %out: f32):
    %t = arith.divf %in, %n : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %pb = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%p : tensor<2x2x40x40xf32>) outs(%e4 : tensor<2x2x40x40xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<2x2x40x40xbf16>
  %p3 = tensor.collapse_shape %pb [[0, 1], [2], [3]] : tensor<2x2x40x40xbf16> into tensor<4x40x40xbf16>
  %eo = tensor.empty() : tensor<4x40x64xf32>
  %fo = linalg.fill ins(%zero : f32) outs(%eo : tensor<4x40x64xf32>) -> tensor<4x40x64xf32>
  %o = linalg.batch_matmul ins(%p3, %v : tensor<4x40x40xbf16>, tensor<4x40x64xbf16>) outs(%fo : tensor<4x40x64xf32>) -> tensor<4x40x64xf32>
  %eob = tensor.empty() : tensor<4x40x64xbf16>
  %ob = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%o : tensor<4x40x64xf32>) outs(%eob : tensor<4x40x64xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x40x64xbf16>
  %o4 = tensor.expand_shape %ob [[0, 1], [2], [3]] output_shape [2, 2, 40, 64] : tensor<4x40x64xbf16> into tensor<2x2x40x64xbf16>
  %et = tensor.empty() : tensor<2x40x2x64xbf16>
  %ot = linalg.transpose ins(%o4 : tensor<2x2x40x64xbf16>) outs(%et : tensor<2x40x2x64xbf16>) permutation = [0, 2, 1, 3]
  %out = tensor.collapse_shape %ot [[0], [1], [2, 3]] : tensor<2x40x2x64xbf16> into tensor<2x40x128xbf16>
  return %out : tensor<2x40x128xbf16>
}

func.func @context_used(%x2: tensor<80x384xbf16>, %mask: tensor<2x1x40x40xbf16>) -> (tensor<2x40x128xbf16>, tensor<4x40x64xbf16>) {
  %x = tensor.expand_shape %x2 [[0, 1], [2]] output_shape [2, 40, 384] : tensor<80x384xbf16> into tensor<2x40x384xbf16>
  %sq = tensor.extract_slice %x[0, 0, 0] [2, 40, 128] [1, 1, 1] : tensor<2x40x384xbf16> to tensor<2x40x128xbf16>
  %sk = tensor.extract_slice %x[0, 0, 128] [2, 40, 128] [1, 1, 1] : tensor<2x40x384xbf16> to tensor<2x40x128xbf16>
  %sv = tensor.extract_slice %x[0, 0, 256] [2, 40, 128] [1, 1, 1] : tensor<2x40x384xbf16> to tensor<2x40x128xbf16>
  %q4 = tensor.expand_shape %sq [[0], [1], [2, 3]] output_shape [2, 40, 2, 64] : tensor<2x40x128xbf16> into tensor<2x40x2x64xbf16>
  %k4 = tensor.expand_shape %sk [[0], [1], [2, 3]] output_shape [2, 40, 2, 64] : tensor<2x40x128xbf16> into tensor<2x40x2x64xbf16>
  %v4 = tensor.expand_shape %sv [[0], [1], [2, 3]] output_shape [2, 40, 2, 64] : tensor<2x40x128xbf16> into tensor<2x40x2x64xbf16>
  %eh = tensor.empty() : tensor<2x2x40x64xbf16>
  %ekt = tensor.empty() : tensor<2x2x64x40xbf16>
  %qt = linalg.transpose ins(%q4 : tensor<2x40x2x64xbf16>) outs(%eh : tensor<2x2x40x64xbf16>) permutation = [0, 2, 1, 3]
  %ktt = linalg.transpose ins(%k4 : tensor<2x40x2x64xbf16>) outs(%ekt : tensor<2x2x64x40xbf16>) permutation = [0, 2, 3, 1]
  %vt = linalg.transpose ins(%v4 : tensor<2x40x2x64xbf16>) outs(%eh : tensor<2x2x40x64xbf16>) permutation = [0, 2, 1, 3]
  %q = tensor.collapse_shape %qt [[0, 1], [2], [3]] : tensor<2x2x40x64xbf16> into tensor<4x40x64xbf16>
  %kt = tensor.collapse_shape %ktt [[0, 1], [2], [3]] : tensor<2x2x64x40xbf16> into tensor<4x64x40xbf16>
  %v = tensor.collapse_shape %vt [[0, 1], [2], [3]] : tensor<2x2x40x64xbf16> into tensor<4x40x64xbf16>
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 1.250000e-01 : bf16
  %es = tensor.empty() : tensor<4x40x40xf32>
  %fs = linalg.fill ins(%zero : f32) outs(%es : tensor<4x40x40xf32>) -> tensor<4x40x40xf32>
  %s = linalg.batch_matmul ins(%q, %kt : tensor<4x40x64xbf16>, tensor<4x64x40xbf16>) outs(%fs : tensor<4x40x40xf32>) -> tensor<4x40x40xf32>
  %esb = tensor.empty() : tensor<4x40x40xbf16>
  %sb = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : tensor<4x40x40xf32>) outs(%esb : tensor<4x40x40xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x40x40xbf16>
  %s4 = tensor.expand_shape %sb [[0, 1], [2], [3]] output_shape [2, 2, 40, 40] : tensor<4x40x40xbf16> into tensor<2x2x40x40xbf16>
  %e4 = tensor.empty() : tensor<2x2x40x40xbf16>
  %sc = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<2x2x40x40xbf16>) outs(%e4 : tensor<2x2x40x40xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %t = arith.mulf %in, %scale : bf16
    linalg.yield %t : bf16
  } -> tensor<2x2x40x40xbf16>
  %y = linalg.generic {indexing_maps = [#id4, #mask4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sc, %mask : tensor<2x2x40x40xbf16>, tensor<2x1x40x40xbf16>) outs(%e4 : tensor<2x2x40x40xbf16>) {
  ^bb0(%in: bf16, %m: bf16, %out: bf16):
    %t = arith.addf %in, %m : bf16
    linalg.yield %t : bf16
  } -> tensor<2x2x40x40xbf16>
  %e4f = tensor.empty() : tensor<2x2x40x40xf32>
  %yf = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%y : tensor<2x2x40x40xbf16>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %t = arith.extf %in : bf16 to f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %er = tensor.empty() : tensor<2x2x40xf32>
  %fm = linalg.fill ins(%ninf : f32) outs(%er : tensor<2x2x40xf32>) -> tensor<2x2x40xf32>
  %mx = linalg.generic {indexing_maps = [#id4, #row4], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%yf : tensor<2x2x40x40xf32>) outs(%fm : tensor<2x2x40xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.maximumf %in, %out : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40xf32>
  %d = linalg.generic {indexing_maps = [#id4, #row4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%yf, %mx : tensor<2x2x40x40xf32>, tensor<2x2x40xf32>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: f32, %m: f32, %out: f32):
    %t = arith.subf %in, %m : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %ex = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%d : tensor<2x2x40x40xf32>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = math.exp %in : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %fz = linalg.fill ins(%zero : f32) outs(%er : tensor<2x2x40xf32>) -> tensor<2x2x40xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row4], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%ex : tensor<2x2x40x40xf32>) outs(%fz : tensor<2x2x40xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.addf %in, %out : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%ex, %sum : tensor<2x2x40x40xf32>, tensor<2x2x40xf32>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: f32, %n: f32, %out: f32):
    %t = arith.divf %in, %n : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %pb = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%p : tensor<2x2x40x40xf32>) outs(%e4 : tensor<2x2x40x40xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<2x2x40x40xbf16>
  %p3 = tensor.collapse_shape %pb [[0, 1], [2], [3]] : tensor<2x2x40x40xbf16> into tensor<4x40x40xbf16>
  %eo = tensor.empty() : tensor<4x40x64xf32>
  %fo = linalg.fill ins(%zero : f32) outs(%eo : tensor<4x40x64xf32>) -> tensor<4x40x64xf32>
  %o = linalg.batch_matmul ins(%p3, %v : tensor<4x40x40xbf16>, tensor<4x40x64xbf16>) outs(%fo : tensor<4x40x64xf32>) -> tensor<4x40x64xf32>
  %eob = tensor.empty() : tensor<4x40x64xbf16>
  %ob = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%o : tensor<4x40x64xf32>) outs(%eob : tensor<4x40x64xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x40x64xbf16>
  %o4 = tensor.expand_shape %ob [[0, 1], [2], [3]] output_shape [2, 2, 40, 64] : tensor<4x40x64xbf16> into tensor<2x2x40x64xbf16>
  %et = tensor.empty() : tensor<2x40x2x64xbf16>
  %ot = linalg.transpose ins(%o4 : tensor<2x2x40x64xbf16>) outs(%et : tensor<2x40x2x64xbf16>) permutation = [0, 2, 1, 3]
  %out = tensor.collapse_shape %ot [[0], [1], [2, 3]] : tensor<2x40x2x64xbf16> into tensor<2x40x128xbf16>
  return %out, %ob : tensor<2x40x128xbf16>, tensor<4x40x64xbf16>
}

func.func @q_used(%x2: tensor<80x384xbf16>, %mask: tensor<2x1x40x40xbf16>) -> (tensor<2x40x128xbf16>, tensor<4x40x64xbf16>) {
  %x = tensor.expand_shape %x2 [[0, 1], [2]] output_shape [2, 40, 384] : tensor<80x384xbf16> into tensor<2x40x384xbf16>
  %sq = tensor.extract_slice %x[0, 0, 0] [2, 40, 128] [1, 1, 1] : tensor<2x40x384xbf16> to tensor<2x40x128xbf16>
  %sk = tensor.extract_slice %x[0, 0, 128] [2, 40, 128] [1, 1, 1] : tensor<2x40x384xbf16> to tensor<2x40x128xbf16>
  %sv = tensor.extract_slice %x[0, 0, 256] [2, 40, 128] [1, 1, 1] : tensor<2x40x384xbf16> to tensor<2x40x128xbf16>
  %q4 = tensor.expand_shape %sq [[0], [1], [2, 3]] output_shape [2, 40, 2, 64] : tensor<2x40x128xbf16> into tensor<2x40x2x64xbf16>
  %k4 = tensor.expand_shape %sk [[0], [1], [2, 3]] output_shape [2, 40, 2, 64] : tensor<2x40x128xbf16> into tensor<2x40x2x64xbf16>
  %v4 = tensor.expand_shape %sv [[0], [1], [2, 3]] output_shape [2, 40, 2, 64] : tensor<2x40x128xbf16> into tensor<2x40x2x64xbf16>
  %eh = tensor.empty() : tensor<2x2x40x64xbf16>
  %ekt = tensor.empty() : tensor<2x2x64x40xbf16>
  %qt = linalg.transpose ins(%q4 : tensor<2x40x2x64xbf16>) outs(%eh : tensor<2x2x40x64xbf16>) permutation = [0, 2, 1, 3]
  %ktt = linalg.transpose ins(%k4 : tensor<2x40x2x64xbf16>) outs(%ekt : tensor<2x2x64x40xbf16>) permutation = [0, 2, 3, 1]
  %vt = linalg.transpose ins(%v4 : tensor<2x40x2x64xbf16>) outs(%eh : tensor<2x2x40x64xbf16>) permutation = [0, 2, 1, 3]
  %q = tensor.collapse_shape %qt [[0, 1], [2], [3]] : tensor<2x2x40x64xbf16> into tensor<4x40x64xbf16>
  %kt = tensor.collapse_shape %ktt [[0, 1], [2], [3]] : tensor<2x2x64x40xbf16> into tensor<4x64x40xbf16>
  %v = tensor.collapse_shape %vt [[0, 1], [2], [3]] : tensor<2x2x40x64xbf16> into tensor<4x40x64xbf16>
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 1.250000e-01 : bf16
  %es = tensor.empty() : tensor<4x40x40xf32>
  %fs = linalg.fill ins(%zero : f32) outs(%es : tensor<4x40x40xf32>) -> tensor<4x40x40xf32>
  %s = linalg.batch_matmul ins(%q, %kt : tensor<4x40x64xbf16>, tensor<4x64x40xbf16>) outs(%fs : tensor<4x40x40xf32>) -> tensor<4x40x40xf32>
  %esb = tensor.empty() : tensor<4x40x40xbf16>
  %sb = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%s : tensor<4x40x40xf32>) outs(%esb : tensor<4x40x40xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x40x40xbf16>
  %s4 = tensor.expand_shape %sb [[0, 1], [2], [3]] output_shape [2, 2, 40, 40] : tensor<4x40x40xbf16> into tensor<2x2x40x40xbf16>
  %e4 = tensor.empty() : tensor<2x2x40x40xbf16>
  %sc = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<2x2x40x40xbf16>) outs(%e4 : tensor<2x2x40x40xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %t = arith.mulf %in, %scale : bf16
    linalg.yield %t : bf16
  } -> tensor<2x2x40x40xbf16>
  %y = linalg.generic {indexing_maps = [#id4, #mask4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sc, %mask : tensor<2x2x40x40xbf16>, tensor<2x1x40x40xbf16>) outs(%e4 : tensor<2x2x40x40xbf16>) {
  ^bb0(%in: bf16, %m: bf16, %out: bf16):
    %t = arith.addf %in, %m : bf16
    linalg.yield %t : bf16
  } -> tensor<2x2x40x40xbf16>
  %e4f = tensor.empty() : tensor<2x2x40x40xf32>
  %yf = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%y : tensor<2x2x40x40xbf16>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %t = arith.extf %in : bf16 to f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %er = tensor.empty() : tensor<2x2x40xf32>
  %fm = linalg.fill ins(%ninf : f32) outs(%er : tensor<2x2x40xf32>) -> tensor<2x2x40xf32>
  %mx = linalg.generic {indexing_maps = [#id4, #row4], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%yf : tensor<2x2x40x40xf32>) outs(%fm : tensor<2x2x40xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.maximumf %in, %out : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40xf32>
  %d = linalg.generic {indexing_maps = [#id4, #row4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%yf, %mx : tensor<2x2x40x40xf32>, tensor<2x2x40xf32>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: f32, %m: f32, %out: f32):
    %t = arith.subf %in, %m : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %ex = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%d : tensor<2x2x40x40xf32>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = math.exp %in : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %fz = linalg.fill ins(%zero : f32) outs(%er : tensor<2x2x40xf32>) -> tensor<2x2x40xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row4], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%ex : tensor<2x2x40x40xf32>) outs(%fz : tensor<2x2x40xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.addf %in, %out : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%ex, %sum : tensor<2x2x40x40xf32>, tensor<2x2x40xf32>) outs(%e4f : tensor<2x2x40x40xf32>) {
  ^bb0(%in: f32, %n: f32, %out: f32):
    %t = arith.divf %in, %n : f32
    linalg.yield %t : f32
  } -> tensor<2x2x40x40xf32>
  %pb = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%p : tensor<2x2x40x40xf32>) outs(%e4 : tensor<2x2x40x40xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<2x2x40x40xbf16>
  %p3 = tensor.collapse_shape %pb [[0, 1], [2], [3]] : tensor<2x2x40x40xbf16> into tensor<4x40x40xbf16>
  %eo = tensor.empty() : tensor<4x40x64xf32>
  %fo = linalg.fill ins(%zero : f32) outs(%eo : tensor<4x40x64xf32>) -> tensor<4x40x64xf32>
  %o = linalg.batch_matmul ins(%p3, %v : tensor<4x40x40xbf16>, tensor<4x40x64xbf16>) outs(%fo : tensor<4x40x64xf32>) -> tensor<4x40x64xf32>
  %eob = tensor.empty() : tensor<4x40x64xbf16>
  %ob = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%o : tensor<4x40x64xf32>) outs(%eob : tensor<4x40x64xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x40x64xbf16>
  %o4 = tensor.expand_shape %ob [[0, 1], [2], [3]] output_shape [2, 2, 40, 64] : tensor<4x40x64xbf16> into tensor<2x2x40x64xbf16>
  %et = tensor.empty() : tensor<2x40x2x64xbf16>
  %ot = linalg.transpose ins(%o4 : tensor<2x2x40x64xbf16>) outs(%et : tensor<2x40x2x64xbf16>) permutation = [0, 2, 1, 3]
  %out = tensor.collapse_shape %ot [[0], [1], [2, 3]] : tensor<2x40x2x64xbf16> into tensor<2x40x128xbf16>
  return %out, %q : tensor<2x40x128xbf16>, tensor<4x40x64xbf16>
}
