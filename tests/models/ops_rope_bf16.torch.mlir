// apply_rotary_pos_emb of q, k [2, 2, 8, 32] with cos, sin [2, 8, 32], and a residual add, bf16 (transformers 5.24.0, torch 2.14.1+cu130).
// Made by: python -m tests.support.op_exports tests/models (torch.export + IREE's FX importer). Test model.
module {
  func.func @main(%arg0: !torch.vtensor<[2,2,8,32],bf16>, %arg1: !torch.vtensor<[2,2,8,32],bf16>, %arg2: !torch.vtensor<[2,8,32],bf16>, %arg3: !torch.vtensor<[2,8,32],bf16>, %arg4: !torch.vtensor<[2,8,32],bf16>, %arg5: !torch.vtensor<[2,8,32],bf16>) -> (!torch.vtensor<[2,2,8,32],bf16>, !torch.vtensor<[2,2,8,32],bf16>, !torch.vtensor<[2,8,32],bf16>) {
    %int1 = torch.constant.int 1
    %0 = torch.aten.unsqueeze %arg2, %int1 : !torch.vtensor<[2,8,32],bf16>, !torch.int -> !torch.vtensor<[2,1,8,32],bf16>
    %int1_0 = torch.constant.int 1
    %1 = torch.aten.unsqueeze %arg3, %int1_0 : !torch.vtensor<[2,8,32],bf16>, !torch.int -> !torch.vtensor<[2,1,8,32],bf16>
    %2 = torch.aten.mul.Tensor %arg0, %0 : !torch.vtensor<[2,2,8,32],bf16>, !torch.vtensor<[2,1,8,32],bf16> -> !torch.vtensor<[2,2,8,32],bf16>
    %int3 = torch.constant.int 3
    %int0 = torch.constant.int 0
    %int16 = torch.constant.int 16
    %int1_1 = torch.constant.int 1
    %3 = torch.aten.slice.Tensor %arg0, %int3, %int0, %int16, %int1_1 : !torch.vtensor<[2,2,8,32],bf16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,2,8,16],bf16>
    %int3_2 = torch.constant.int 3
    %int16_3 = torch.constant.int 16
    %int9223372036854775807 = torch.constant.int 9223372036854775807
    %int1_4 = torch.constant.int 1
    %4 = torch.aten.slice.Tensor %arg0, %int3_2, %int16_3, %int9223372036854775807, %int1_4 : !torch.vtensor<[2,2,8,32],bf16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,2,8,16],bf16>
    %5 = torch.aten.neg %4 : !torch.vtensor<[2,2,8,16],bf16> -> !torch.vtensor<[2,2,8,16],bf16>
    %6 = torch.prim.ListConstruct %5, %3 : (!torch.vtensor<[2,2,8,16],bf16>, !torch.vtensor<[2,2,8,16],bf16>) -> !torch.list<vtensor>
    %int-1 = torch.constant.int -1
    %7 = torch.aten.cat %6, %int-1 : !torch.list<vtensor>, !torch.int -> !torch.vtensor<[2,2,8,32],bf16>
    %8 = torch.aten.mul.Tensor %7, %1 : !torch.vtensor<[2,2,8,32],bf16>, !torch.vtensor<[2,1,8,32],bf16> -> !torch.vtensor<[2,2,8,32],bf16>
    %int1_5 = torch.constant.int 1
    %9 = torch.aten.add.Tensor %2, %8, %int1_5 : !torch.vtensor<[2,2,8,32],bf16>, !torch.vtensor<[2,2,8,32],bf16>, !torch.int -> !torch.vtensor<[2,2,8,32],bf16>
    %10 = torch.aten.mul.Tensor %arg1, %0 : !torch.vtensor<[2,2,8,32],bf16>, !torch.vtensor<[2,1,8,32],bf16> -> !torch.vtensor<[2,2,8,32],bf16>
    %int3_6 = torch.constant.int 3
    %int0_7 = torch.constant.int 0
    %int16_8 = torch.constant.int 16
    %int1_9 = torch.constant.int 1
    %11 = torch.aten.slice.Tensor %arg1, %int3_6, %int0_7, %int16_8, %int1_9 : !torch.vtensor<[2,2,8,32],bf16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,2,8,16],bf16>
    %int3_10 = torch.constant.int 3
    %int16_11 = torch.constant.int 16
    %int9223372036854775807_12 = torch.constant.int 9223372036854775807
    %int1_13 = torch.constant.int 1
    %12 = torch.aten.slice.Tensor %arg1, %int3_10, %int16_11, %int9223372036854775807_12, %int1_13 : !torch.vtensor<[2,2,8,32],bf16>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[2,2,8,16],bf16>
    %13 = torch.aten.neg %12 : !torch.vtensor<[2,2,8,16],bf16> -> !torch.vtensor<[2,2,8,16],bf16>
    %14 = torch.prim.ListConstruct %13, %11 : (!torch.vtensor<[2,2,8,16],bf16>, !torch.vtensor<[2,2,8,16],bf16>) -> !torch.list<vtensor>
    %int-1_14 = torch.constant.int -1
    %15 = torch.aten.cat %14, %int-1_14 : !torch.list<vtensor>, !torch.int -> !torch.vtensor<[2,2,8,32],bf16>
    %16 = torch.aten.mul.Tensor %15, %1 : !torch.vtensor<[2,2,8,32],bf16>, !torch.vtensor<[2,1,8,32],bf16> -> !torch.vtensor<[2,2,8,32],bf16>
    %int1_15 = torch.constant.int 1
    %17 = torch.aten.add.Tensor %10, %16, %int1_15 : !torch.vtensor<[2,2,8,32],bf16>, !torch.vtensor<[2,2,8,32],bf16>, !torch.int -> !torch.vtensor<[2,2,8,32],bf16>
    %int1_16 = torch.constant.int 1
    %18 = torch.aten.add.Tensor %arg4, %arg5, %int1_16 : !torch.vtensor<[2,8,32],bf16>, !torch.vtensor<[2,8,32],bf16>, !torch.int -> !torch.vtensor<[2,8,32],bf16>
    return %9, %17, %18 : !torch.vtensor<[2,2,8,32],bf16>, !torch.vtensor<[2,2,8,32],bf16>, !torch.vtensor<[2,8,32],bf16>
  }
}
