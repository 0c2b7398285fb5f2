// LlamaRMSNorm(32, eps=1e-6) over [2, 8, 32], its weight an input, f32 (transformers 5.24.0, torch 2.14.1+cu130).
// Made by: python -m tests.support.op_exports tests/models (torch.export + IREE's FX importer). Test model.
module {
  func.func @main(%arg0: !torch.vtensor<[2,8,32],f32>, %arg1: !torch.vtensor<[32],f32>) -> !torch.vtensor<[2,8,32],f32> {
    %none = torch.constant.none
    %none_0 = torch.constant.none
    %int6 = torch.constant.int 6
    %cpu = torch.constant.device "cpu"
    %int0 = torch.constant.int 0
    torch.aten._assert_tensor_metadata %arg0, %none, %none_0, %int6, %cpu, %int0 : !torch.vtensor<[2,8,32],f32>, !torch.none, !torch.none, !torch.int, !torch.Device, !torch.int
    %int6_1 = torch.constant.int 6
    %false = torch.constant.bool false
    %false_2 = torch.constant.bool false
    %none_3 = torch.constant.none
    %0 = torch.aten.to.dtype %arg0, %int6_1, %false, %false_2, %none_3 : !torch.vtensor<[2,8,32],f32>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,8,32],f32>
    %int2 = torch.constant.int 2
    %1 = torch.aten.pow.Tensor_Scalar %0, %int2 : !torch.vtensor<[2,8,32],f32>, !torch.int -> !torch.vtensor<[2,8,32],f32>
    %int-1 = torch.constant.int -1
    %2 = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
    %true = torch.constant.bool true
    %none_4 = torch.constant.none
    %3 = torch.aten.mean.dim %1, %2, %true, %none_4 : !torch.vtensor<[2,8,32],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2,8,1],f32>
    %float9.999990e-07 = torch.constant.float 9.9999999999999995E-7
    %int1 = torch.constant.int 1
    %4 = torch.aten.add.Scalar %3, %float9.999990e-07, %int1 : !torch.vtensor<[2,8,1],f32>, !torch.float, !torch.int -> !torch.vtensor<[2,8,1],f32>
    %5 = torch.aten.rsqrt %4 : !torch.vtensor<[2,8,1],f32> -> !torch.vtensor<[2,8,1],f32>
    %6 = torch.aten.mul.Tensor %0, %5 : !torch.vtensor<[2,8,32],f32>, !torch.vtensor<[2,8,1],f32> -> !torch.vtensor<[2,8,32],f32>
    %none_5 = torch.constant.none
    %none_6 = torch.constant.none
    %int6_7 = torch.constant.int 6
    %cpu_8 = torch.constant.device "cpu"
    %int0_9 = torch.constant.int 0
    torch.aten._assert_tensor_metadata %6, %none_5, %none_6, %int6_7, %cpu_8, %int0_9 : !torch.vtensor<[2,8,32],f32>, !torch.none, !torch.none, !torch.int, !torch.Device, !torch.int
    %int6_10 = torch.constant.int 6
    %false_11 = torch.constant.bool false
    %false_12 = torch.constant.bool false
    %none_13 = torch.constant.none
    %7 = torch.aten.to.dtype %6, %int6_10, %false_11, %false_12, %none_13 : !torch.vtensor<[2,8,32],f32>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,8,32],f32>
    %8 = torch.aten.mul.Tensor %arg1, %7 : !torch.vtensor<[32],f32>, !torch.vtensor<[2,8,32],f32> -> !torch.vtensor<[2,8,32],f32>
    return %8 : !torch.vtensor<[2,8,32],f32>
  }
}
