module {
  func.func @main(%arg0: !torch.vtensor<[2,5,32],bf16>, %arg1: !torch.vtensor<[6,13],bf16>, %arg2: !torch.vtensor<[77,32],bf16>, %arg3: !torch.vtensor<[77,13],bf16>) -> (!torch.vtensor<[2,5,77],f32>, !torch.vtensor<[6,77],bf16>) {
    %none = torch.constant.none
    %0 = torch.aten.linear %arg0, %arg2, %none : !torch.vtensor<[2,5,32],bf16>, !torch.vtensor<[77,32],bf16>, !torch.none -> !torch.vtensor<[2,5,77],bf16>
    %none_0 = torch.constant.none
    %none_1 = torch.constant.none
    %int15 = torch.constant.int 15
    %cpu = torch.constant.device "cpu"
    %int0 = torch.constant.int 0
    torch.aten._assert_tensor_metadata %0, %none_0, %none_1, %int15, %cpu, %int0 : !torch.vtensor<[2,5,77],bf16>, !torch.none, !torch.none, !torch.int, !torch.Device, !torch.int
    %int6 = torch.constant.int 6
    %false = torch.constant.bool false
    %false_2 = torch.constant.bool false
    %none_3 = torch.constant.none
    %1 = torch.aten.to.dtype %0, %int6, %false, %false_2, %none_3 : !torch.vtensor<[2,5,77],bf16>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[2,5,77],f32>
    %none_4 = torch.constant.none
    %2 = torch.aten.linear %arg1, %arg3, %none_4 : !torch.vtensor<[6,13],bf16>, !torch.vtensor<[77,13],bf16>, !torch.none -> !torch.vtensor<[6,77],bf16>
    return %1, %2 : !torch.vtensor<[2,5,77],f32>, !torch.vtensor<[6,77],bf16>
  }
}
