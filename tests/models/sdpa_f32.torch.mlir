// torch 2.13.0+cpu: scaled_dot_product_attention in f32, B = 1, H = 4, S = 16, D = 64
// Made by: python -m tests.support.sdpa_exports tests/models (torch.export + IREE's FX importer). Test model.
module {
  func.func @plain(%arg0: !torch.vtensor<[1,4,16,64],f32>, %arg1: !torch.vtensor<[1,4,16,64],f32>, %arg2: !torch.vtensor<[1,4,16,64],f32>) -> !torch.vtensor<[1,4,16,64],f32> {
    %none = torch.constant.none
    %float0.000000e00 = torch.constant.float 0.000000e+00
    %false = torch.constant.bool false
    %none_0 = torch.constant.none
    %false_1 = torch.constant.bool false
    %0 = torch.aten.scaled_dot_product_attention %arg0, %arg1, %arg2, %none, %float0.000000e00, %false, %none_0, %false_1 : !torch.vtensor<[1,4,16,64],f32>, !torch.vtensor<[1,4,16,64],f32>, !torch.vtensor<[1,4,16,64],f32>, !torch.none, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,4,16,64],f32>
    return %0 : !torch.vtensor<[1,4,16,64],f32>
  }
  func.func @causal(%arg0: !torch.vtensor<[1,4,16,64],f32>, %arg1: !torch.vtensor<[1,4,16,64],f32>, %arg2: !torch.vtensor<[1,4,16,64],f32>) -> !torch.vtensor<[1,4,16,64],f32> {
    %none = torch.constant.none
    %float0.000000e00 = torch.constant.float 0.000000e+00
    %true = torch.constant.bool true
    %none_0 = torch.constant.none
    %false = torch.constant.bool false
    %0 = torch.aten.scaled_dot_product_attention %arg0, %arg1, %arg2, %none, %float0.000000e00, %true, %none_0, %false : !torch.vtensor<[1,4,16,64],f32>, !torch.vtensor<[1,4,16,64],f32>, !torch.vtensor<[1,4,16,64],f32>, !torch.none, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,4,16,64],f32>
    return %0 : !torch.vtensor<[1,4,16,64],f32>
  }
}
