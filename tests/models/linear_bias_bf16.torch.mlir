module {
  func.func @main(%arg0: !torch.vtensor<[2,8,64],bf16>, %arg1: !torch.vtensor<[64,192],bf16>, %arg2: !torch.vtensor<[192],bf16>, %arg3: !torch.vtensor<[64,192],bf16>, %arg4: !torch.vtensor<[64],bf16>) -> !torch.vtensor<[2,8,64],bf16> {
    %int-1 = torch.constant.int -1
    %int64 = torch.constant.int 64
    %0 = torch.prim.ListConstruct %int-1, %int64 : (!torch.int, !torch.int) -> !torch.list<int>
    %1 = torch.aten.view %arg0, %0 : !torch.vtensor<[2,8,64],bf16>, !torch.list<int> -> !torch.vtensor<[16,64],bf16>
    %int1 = torch.constant.int 1
    %2 = torch.aten.addmm %arg2, %1, %arg1, %int1, %int1 : !torch.vtensor<[192],bf16>, !torch.vtensor<[16,64],bf16>, !torch.vtensor<[64,192],bf16>, !torch.int, !torch.int -> !torch.vtensor<[16,192],bf16>
    %int2 = torch.constant.int 2
    %int8 = torch.constant.int 8
    %int192 = torch.constant.int 192
    %3 = torch.prim.ListConstruct %int2, %int8, %int192 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
    %4 = torch.aten.view %2, %3 : !torch.vtensor<[16,192],bf16>, !torch.list<int> -> !torch.vtensor<[2,8,192],bf16>
    %5 = torch.aten.linear %4, %arg3, %arg4 : !torch.vtensor<[2,8,192],bf16>, !torch.vtensor<[64,192],bf16>, !torch.vtensor<[64],bf16> -> !torch.vtensor<[2,8,64],bf16>
    %6 = torch.aten.add.Tensor %5, %arg0, %int1 : !torch.vtensor<[2,8,64],bf16>, !torch.vtensor<[2,8,64],bf16>, !torch.int -> !torch.vtensor<[2,8,64],bf16>
    return %6 : !torch.vtensor<[2,8,64],bf16>
  }
}
