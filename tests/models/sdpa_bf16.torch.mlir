// torch 2.13.0+cpu: scaled_dot_product_attention, B = 1, H = 4, S = 16, D = 64 unless named
// Made by: python -m tests.support.sdpa_exports tests/models (torch.export + IREE's FX importer). Test model.
module {
  func.func @plain(%arg0: !torch.vtensor<[1,4,16,64],bf16>, %arg1: !torch.vtensor<[1,4,16,64],bf16>, %arg2: !torch.vtensor<[1,4,16,64],bf16>) -> !torch.vtensor<[1,4,16,64],bf16> {
    %none = torch.constant.none
    %float0.000000e00 = torch.constant.float 0.000000e+00
    %false = torch.constant.bool false
    %none_0 = torch.constant.none
    %false_1 = torch.constant.bool false
    %0 = torch.aten.scaled_dot_product_attention %arg0, %arg1, %arg2, %none, %float0.000000e00, %false, %none_0, %false_1 : !torch.vtensor<[1,4,16,64],bf16>, !torch.vtensor<[1,4,16,64],bf16>, !torch.vtensor<[1,4,16,64],bf16>, !torch.none, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,4,16,64],bf16>
    return %0 : !torch.vtensor<[1,4,16,64],bf16>
  }
  func.func @causal(%arg0: !torch.vtensor<[1,4,16,64],bf16>, %arg1: !torch.vtensor<[1,4,16,64],bf16>, %arg2: !torch.vtensor<[1,4,16,64],bf16>) -> !torch.vtensor<[1,4,16,64],bf16> {
    %none = torch.constant.none
    %float0.000000e00 = torch.constant.float 0.000000e+00
    %true = torch.constant.bool true
    %none_0 = torch.constant.none
    %false = torch.constant.bool false
    %0 = torch.aten.scaled_dot_product_attention %arg0, %arg1, %arg2, %none, %float0.000000e00, %true, %none_0, %false : !torch.vtensor<[1,4,16,64],bf16>, !torch.vtensor<[1,4,16,64],bf16>, !torch.vtensor<[1,4,16,64],bf16>, !torch.none, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,4,16,64],bf16>
    return %0 : !torch.vtensor<[1,4,16,64],bf16>
  }
  func.func @masked(%arg0: !torch.vtensor<[1,4,16,64],bf16>, %arg1: !torch.vtensor<[1,4,16,64],bf16>, %arg2: !torch.vtensor<[1,4,16,64],bf16>, %arg3: !torch.vtensor<[1,1,16,16],bf16>) -> !torch.vtensor<[1,4,16,64],bf16> {
    %float0.000000e00 = torch.constant.float 0.000000e+00
    %false = torch.constant.bool false
    %none = torch.constant.none
    %false_0 = torch.constant.bool false
    %0 = torch.aten.scaled_dot_product_attention %arg0, %arg1, %arg2, %arg3, %float0.000000e00, %false, %none, %false_0 : !torch.vtensor<[1,4,16,64],bf16>, !torch.vtensor<[1,4,16,64],bf16>, !torch.vtensor<[1,4,16,64],bf16>, !torch.vtensor<[1,1,16,16],bf16>, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,4,16,64],bf16>
    return %0 : !torch.vtensor<[1,4,16,64],bf16>
  }
  func.func @masked_full(%arg0: !torch.vtensor<[1,4,16,64],bf16>, %arg1: !torch.vtensor<[1,4,16,64],bf16>, %arg2: !torch.vtensor<[1,4,16,64],bf16>, %arg3: !torch.vtensor<[1,4,16,16],bf16>) -> !torch.vtensor<[1,4,16,64],bf16> {
    %float0.000000e00 = torch.constant.float 0.000000e+00
    %false = torch.constant.bool false
    %none = torch.constant.none
    %false_0 = torch.constant.bool false
    %0 = torch.aten.scaled_dot_product_attention %arg0, %arg1, %arg2, %arg3, %float0.000000e00, %false, %none, %false_0 : !torch.vtensor<[1,4,16,64],bf16>, !torch.vtensor<[1,4,16,64],bf16>, !torch.vtensor<[1,4,16,64],bf16>, !torch.vtensor<[1,4,16,16],bf16>, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,4,16,64],bf16>
    return %0 : !torch.vtensor<[1,4,16,64],bf16>
  }
  func.func @scaled(%arg0: !torch.vtensor<[1,4,16,64],bf16>, %arg1: !torch.vtensor<[1,4,16,64],bf16>, %arg2: !torch.vtensor<[1,4,16,64],bf16>) -> !torch.vtensor<[1,4,16,64],bf16> {
    %none = torch.constant.none
    %float0.000000e00 = torch.constant.float 0.000000e+00
    %false = torch.constant.bool false
    %float3.000000e-01 = torch.constant.float 3.000000e-01
    %false_0 = torch.constant.bool false
    %0 = torch.aten.scaled_dot_product_attention %arg0, %arg1, %arg2, %none, %float0.000000e00, %false, %float3.000000e-01, %false_0 : !torch.vtensor<[1,4,16,64],bf16>, !torch.vtensor<[1,4,16,64],bf16>, !torch.vtensor<[1,4,16,64],bf16>, !torch.none, !torch.float, !torch.bool, !torch.float, !torch.bool -> !torch.vtensor<[1,4,16,64],bf16>
    return %0 : !torch.vtensor<[1,4,16,64],bf16>
  }
  func.func @gqa(%arg0: !torch.vtensor<[1,4,16,64],bf16>, %arg1: !torch.vtensor<[1,2,16,64],bf16>, %arg2: !torch.vtensor<[1,2,16,64],bf16>) -> !torch.vtensor<[1,4,16,64],bf16> {
    %int2 = torch.constant.int 2
    %int1 = torch.constant.int 1
    %none = torch.constant.none
    %0 = torch.aten.repeat_interleave.self_int %arg1, %int2, %int1, %none : !torch.vtensor<[1,2,16,64],bf16>, !torch.int, !torch.int, !torch.none -> !torch.vtensor<[1,4,16,64],bf16>
    %int2_0 = torch.constant.int 2
    %int1_1 = torch.constant.int 1
    %none_2 = torch.constant.none
    %1 = torch.aten.repeat_interleave.self_int %arg2, %int2_0, %int1_1, %none_2 : !torch.vtensor<[1,2,16,64],bf16>, !torch.int, !torch.int, !torch.none -> !torch.vtensor<[1,4,16,64],bf16>
    %none_3 = torch.constant.none
    %float0.000000e00 = torch.constant.float 0.000000e+00
    %true = torch.constant.bool true
    %none_4 = torch.constant.none
    %false = torch.constant.bool false
    %2 = torch.aten.scaled_dot_product_attention %arg0, %0, %1, %none_3, %float0.000000e00, %true, %none_4, %false : !torch.vtensor<[1,4,16,64],bf16>, !torch.vtensor<[1,4,16,64],bf16>, !torch.vtensor<[1,4,16,64],bf16>, !torch.none, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,4,16,64],bf16>
    return %2 : !torch.vtensor<[1,4,16,64],bf16>
  }
  func.func @transposed(%arg0: !torch.vtensor<[1,16,4,64],bf16>, %arg1: !torch.vtensor<[1,16,4,64],bf16>, %arg2: !torch.vtensor<[1,16,4,64],bf16>) -> !torch.vtensor<[1,16,4,64],bf16> {
    %int1 = torch.constant.int 1
    %int2 = torch.constant.int 2
    %0 = torch.aten.transpose.int %arg0, %int1, %int2 : !torch.vtensor<[1,16,4,64],bf16>, !torch.int, !torch.int -> !torch.vtensor<[1,4,16,64],bf16>
    %int1_0 = torch.constant.int 1
    %int2_1 = torch.constant.int 2
    %1 = torch.aten.transpose.int %arg1, %int1_0, %int2_1 : !torch.vtensor<[1,16,4,64],bf16>, !torch.int, !torch.int -> !torch.vtensor<[1,4,16,64],bf16>
    %int1_2 = torch.constant.int 1
    %int2_3 = torch.constant.int 2
    %2 = torch.aten.transpose.int %arg2, %int1_2, %int2_3 : !torch.vtensor<[1,16,4,64],bf16>, !torch.int, !torch.int -> !torch.vtensor<[1,4,16,64],bf16>
    %none = torch.constant.none
    %float0.000000e00 = torch.constant.float 0.000000e+00
    %true = torch.constant.bool true
    %none_4 = torch.constant.none
    %false = torch.constant.bool false
    %3 = torch.aten.scaled_dot_product_attention %0, %1, %2, %none, %float0.000000e00, %true, %none_4, %false : !torch.vtensor<[1,4,16,64],bf16>, !torch.vtensor<[1,4,16,64],bf16>, !torch.vtensor<[1,4,16,64],bf16>, !torch.none, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,4,16,64],bf16>
    %int1_5 = torch.constant.int 1
    %int2_6 = torch.constant.int 2
    %4 = torch.aten.transpose.int %3, %int1_5, %int2_6 : !torch.vtensor<[1,4,16,64],bf16>, !torch.int, !torch.int -> !torch.vtensor<[1,16,4,64],bf16>
    return %4 : !torch.vtensor<[1,16,4,64],bf16>
  }
  func.func @head_dim_32(%arg0: !torch.vtensor<[1,4,16,32],bf16>, %arg1: !torch.vtensor<[1,4,16,32],bf16>, %arg2: !torch.vtensor<[1,4,16,32],bf16>) -> !torch.vtensor<[1,4,16,32],bf16> {
    %none = torch.constant.none
    %float0.000000e00 = torch.constant.float 0.000000e+00
    %true = torch.constant.bool true
    %none_0 = torch.constant.none
    %false = torch.constant.bool false
    %0 = torch.aten.scaled_dot_product_attention %arg0, %arg1, %arg2, %none, %float0.000000e00, %true, %none_0, %false : !torch.vtensor<[1,4,16,32],bf16>, !torch.vtensor<[1,4,16,32],bf16>, !torch.vtensor<[1,4,16,32],bf16>, !torch.none, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,4,16,32],bf16>
    return %0 : !torch.vtensor<[1,4,16,32],bf16>
  }
  func.func @head_dim_128(%arg0: !torch.vtensor<[1,4,16,128],bf16>, %arg1: !torch.vtensor<[1,4,16,128],bf16>, %arg2: !torch.vtensor<[1,4,16,128],bf16>) -> !torch.vtensor<[1,4,16,128],bf16> {
    %none = torch.constant.none
    %float0.000000e00 = torch.constant.float 0.000000e+00
    %false = torch.constant.bool false
    %none_0 = torch.constant.none
    %false_1 = torch.constant.bool false
    %0 = torch.aten.scaled_dot_product_attention %arg0, %arg1, %arg2, %none, %float0.000000e00, %false, %none_0, %false_1 : !torch.vtensor<[1,4,16,128],bf16>, !torch.vtensor<[1,4,16,128],bf16>, !torch.vtensor<[1,4,16,128],bf16>, !torch.none, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,4,16,128],bf16>
    return %0 : !torch.vtensor<[1,4,16,128],bf16>
  }
  func.func @f16(%arg0: !torch.vtensor<[1,4,16,64],f16>, %arg1: !torch.vtensor<[1,4,16,64],f16>, %arg2: !torch.vtensor<[1,4,16,64],f16>) -> !torch.vtensor<[1,4,16,64],f16> {
    %none = torch.constant.none
    %float0.000000e00 = torch.constant.float 0.000000e+00
    %true = torch.constant.bool true
    %none_0 = torch.constant.none
    %false = torch.constant.bool false
    %0 = torch.aten.scaled_dot_product_attention %arg0, %arg1, %arg2, %none, %float0.000000e00, %true, %none_0, %false : !torch.vtensor<[1,4,16,64],f16>, !torch.vtensor<[1,4,16,64],f16>, !torch.vtensor<[1,4,16,64],f16>, !torch.none, !torch.float, !torch.bool, !torch.none, !torch.bool -> !torch.vtensor<[1,4,16,64],f16>
    return %0 : !torch.vtensor<[1,4,16,64],f16>
  }
}
