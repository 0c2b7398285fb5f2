module {
  func.func @main(%arg0: !torch.vtensor<[2,8,64],bf16>, %arg1: !torch.vtensor<[128,64],bf16>, %arg2: !torch.vtensor<[128],bf16>) -> !torch.vtensor<[2,8,128],bf16> {
    %0 = torch.aten.linear %arg0, %arg1, %arg2 : !torch.vtensor<[2,8,64],bf16>, !torch.vtensor<[128,64],bf16>, !torch.vtensor<[128],bf16> -> !torch.vtensor<[2,8,128],bf16>
    %str = torch.constant.str "tanh"
    %1 = torch.aten.gelu %0, %str : !torch.vtensor<[2,8,128],bf16>, !torch.str -> !torch.vtensor<[2,8,128],bf16>
    return %1 : !torch.vtensor<[2,8,128],bf16>
  }
}
