module {
  func.func @main(%arg0: !torch.vtensor<[2,8,64],bf16>, %arg1: !torch.vtensor<[64,128],bf16>, %arg2: !torch.vtensor<[128],bf16>, %arg3: !torch.vtensor<[128,64],bf16>, %arg4: !torch.vtensor<[64],bf16>, %arg5: !torch.vtensor<[100,64],bf16>) -> !torch.vtensor<[2,8,100],bf16> {
    %int-1 = torch.constant.int -1
    %int64 = torch.constant.int 64
    %0 = torch.prim.ListConstruct %int-1, %int64 : (!torch.int, !torch.int) -> !torch.list<int>
    %1 = torch.aten.view %arg0, %0 : !torch.vtensor<[2,8,64],bf16>, !torch.list<int> -> !torch.vtensor<[16,64],bf16>
    %int1 = torch.constant.int 1
    %int1_0 = torch.constant.int 1
    %2 = torch.aten.addmm %arg2, %1, %arg1, %int1, %int1_0 : !torch.vtensor<[128],bf16>, !torch.vtensor<[16,64],bf16>, !torch.vtensor<[64,128],bf16>, !torch.int, !torch.int -> !torch.vtensor<[16,128],bf16>
    %float5.000000e-01 = torch.constant.float 5.000000e-01
    %3 = torch.aten.mul.Scalar %2, %float5.000000e-01 : !torch.vtensor<[16,128],bf16>, !torch.float -> !torch.vtensor<[16,128],bf16>
    %float3.000000e00 = torch.constant.float 3.000000e+00
    %4 = torch.aten.pow.Tensor_Scalar %2, %float3.000000e00 : !torch.vtensor<[16,128],bf16>, !torch.float -> !torch.vtensor<[16,128],bf16>
    %float4.471500e-02 = torch.constant.float 4.471500e-02
    %5 = torch.aten.mul.Scalar %4, %float4.471500e-02 : !torch.vtensor<[16,128],bf16>, !torch.float -> !torch.vtensor<[16,128],bf16>
    %int1_1 = torch.constant.int 1
    %6 = torch.aten.add.Tensor %2, %5, %int1_1 : !torch.vtensor<[16,128],bf16>, !torch.vtensor<[16,128],bf16>, !torch.int -> !torch.vtensor<[16,128],bf16>
    %float7.978850e-01 = torch.constant.float 0.79788456080286541
    %7 = torch.aten.mul.Scalar %6, %float7.978850e-01 : !torch.vtensor<[16,128],bf16>, !torch.float -> !torch.vtensor<[16,128],bf16>
    %8 = torch.aten.tanh %7 : !torch.vtensor<[16,128],bf16> -> !torch.vtensor<[16,128],bf16>
    %float1.000000e00 = torch.constant.float 1.000000e+00
    %int1_2 = torch.constant.int 1
    %9 = torch.aten.add.Scalar %8, %float1.000000e00, %int1_2 : !torch.vtensor<[16,128],bf16>, !torch.float, !torch.int -> !torch.vtensor<[16,128],bf16>
    %10 = torch.aten.mul.Tensor %3, %9 : !torch.vtensor<[16,128],bf16>, !torch.vtensor<[16,128],bf16> -> !torch.vtensor<[16,128],bf16>
    %int1_3 = torch.constant.int 1
    %int1_4 = torch.constant.int 1
    %11 = torch.aten.addmm %arg4, %10, %arg3, %int1_3, %int1_4 : !torch.vtensor<[64],bf16>, !torch.vtensor<[16,128],bf16>, !torch.vtensor<[128,64],bf16>, !torch.int, !torch.int -> !torch.vtensor<[16,64],bf16>
    %int2 = torch.constant.int 2
    %int8 = torch.constant.int 8
    %int64_5 = torch.constant.int 64
    %12 = torch.prim.ListConstruct %int2, %int8, %int64_5 : (!torch.int, !torch.int, !torch.int) -> !torch.list<int>
    %13 = torch.aten.view %11, %12 : !torch.vtensor<[16,64],bf16>, !torch.list<int> -> !torch.vtensor<[2,8,64],bf16>
    %str = torch.constant.str "tanh"
    %14 = torch.aten.gelu %13, %str : !torch.vtensor<[2,8,64],bf16>, !torch.str -> !torch.vtensor<[2,8,64],bf16>
    %15 = torch.aten.t %arg5 : !torch.vtensor<[100,64],bf16> -> !torch.vtensor<[64,100],bf16>
    %16 = torch.aten.matmul %14, %15 : !torch.vtensor<[2,8,64],bf16>, !torch.vtensor<[64,100],bf16> -> !torch.vtensor<[2,8,100],bf16>
    return %16 : !torch.vtensor<[2,8,100],bf16>
  }
}
