// LlamaRMSNorm(32, eps=1e-6) over [2, 8, 32], its weight an input, bf16 (transformers 5.24.0, torch 2.14.1+cu130).
// Made by: python -m tests.support.op_exports tests/models (torch.export + IREE's FX importer). Test model.
module {
  func.func @main(%arg0: !torch.vtensor<[2,8,32],bf16>, %arg1: !torch.vtensor<[32],bf16>) -> !torch.vtensor<[2,8,32],bf16> {
    %none = torch.constant.none
    %none_0 = torch.constant.none
    %int15 = torch.constant.int 15
    %cpu = torch.constant.device "cpu"
    %int0 = torch.constant.int 0
    torch.aten._assert_tensor_metadata %arg0, %none, %none_0, %int15, %cpu, %int0 : !torch.vtensor<[2,8,32],bf16>, !torch.none, !torch.none, !torch.int, !torch.Device, !torch.int
    %int6 = torch.constant.int 6
    %false = torch.constant.bool false
    %false_1 = torch.constant.bool false
    %none_2 = torch.constant.none
    %0 = torch.aten.to.dtype %arg0, %int6, %false, %false_1, %none_2 : !torch.vtensor<[2,8,32],bf16>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,8,32],f32>
    %int2 = torch.constant.int 2
    %1 = torch.aten.pow.Tensor_Scalar %0, %int2 : !torch.vtensor<[2,8,32],f32>, !torch.int -> !torch.vtensor<[2,8,32],f32>
    %int-1 = torch.constant.int -1
    %2 = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
    %true = torch.constant.bool true
    %none_3 = torch.constant.none
    %3 = torch.aten.mean.dim %1, %2, %true, %none_3 : !torch.vtensor<[2,8,32],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[2,8,1],f32>
    %float9.999990e-07 = torch.constant.float 9.9999999999999995E-7
    %int1 = torch.constant.int 1
    %4 = torch.aten.add.Scalar %3, %float9.999990e-07, %int1 : !torch.vtensor<[2,8,1],f32>, !torch.float, !torch.int -> !torch.vtensor<[2,8,1],f32>
    %5 = torch.aten.rsqrt %4 : !torch.vtensor<[2,8,1],f32> -> !torch.vtensor<[2,8,1],f32>
    %6 = torch.aten.mul.Tensor %0, %5 : !torch.vtensor<[2,8,32],f32>, !torch.vtensor<[2,8,1],f32> -> !torch.vtensor<[2,8,32],f32>
    %none_4 = torch.constant.none
    %none_5 = torch.constant.none
    %int6_6 = torch.constant.int 6
    %cpu_7 = torch.constant.device "cpu"
    %int0_8 = torch.constant.int 0
    torch.aten._assert_tensor_metadata %6, %none_4, %none_5, %int6_6, %cpu_7, %int0_8 : !torch.vtensor<[2,8,32],f32>, !torch.none, !torch.none, !torch.int, !torch.Device, !torch.int
    %int15_9 = torch.constant.int 15
    %false_10 = torch.constant.bool false
    %false_11 = torch.constant.bool false
    %none_12 = torch.constant.none
    %7 = torch.aten.to.dtype %6, %int15_9, %false_10, %false_11, %none_12 : !torch.vtensor<[2,8,32],f32>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,8,32],bf16>
    %8 = torch.aten.mul.Tensor %arg1, %7 : !torch.vtensor<[32],bf16>, !torch.vtensor<[2,8,32],bf16> -> !torch.vtensor<[2,8,32],bf16>
    return %8 : !torch.vtensor<[2,8,32],bf16>
  }
}
