// RMSNorm (weight, eps 1e-6), LayerNorm without weight and bias, LayerNorm with a weight only, over
// [4, 8, 96]: torch.export + IREE's FX importer (torch dialect, weights inlined). Test model.
module {
  func.func @main(%arg0: !torch.vtensor<[4,8,96],f32>) -> (!torch.vtensor<[4,8,96],f32>, !torch.vtensor<[4,8,96],f32>, !torch.vtensor<[4,8,96],f32>) {
    %int96 = torch.constant.int 96
    %0 = torch.prim.ListConstruct %int96 : (!torch.int) -> !torch.list<int>
    %1 = torch.vtensor.literal(dense_resource<torch_tensor_96_torch.float32> : tensor<96xf32>) : !torch.vtensor<[96],f32>
    %float9.999990e-07 = torch.constant.float 9.9999999999999995E-7
    %2 = torch.aten.rms_norm %arg0, %0, %1, %float9.999990e-07 : !torch.vtensor<[4,8,96],f32>, !torch.list<int>, !torch.vtensor<[96],f32>, !torch.float -> !torch.vtensor<[4,8,96],f32>
    %int96_0 = torch.constant.int 96
    %3 = torch.prim.ListConstruct %int96_0 : (!torch.int) -> !torch.list<int>
    %none = torch.constant.none
    %none_1 = torch.constant.none
    %float1.000000e-05 = torch.constant.float 1.000000e-05
    %false = torch.constant.bool false
    %4 = torch.aten.layer_norm %arg0, %3, %none, %none_1, %float1.000000e-05, %false : !torch.vtensor<[4,8,96],f32>, !torch.list<int>, !torch.none, !torch.none, !torch.float, !torch.bool -> !torch.vtensor<[4,8,96],f32>
    %int96_2 = torch.constant.int 96
    %5 = torch.prim.ListConstruct %int96_2 : (!torch.int) -> !torch.list<int>
    %6 = torch.vtensor.literal(dense_resource<torch_tensor_96_torch.float32_1> : tensor<96xf32>) : !torch.vtensor<[96],f32>
    %none_3 = torch.constant.none
    %float1.000000e-05_4 = torch.constant.float 1.000000e-05
    %false_5 = torch.constant.bool false
    %7 = torch.aten.layer_norm %arg0, %5, %6, %none_3, %float1.000000e-05_4, %false_5 : !torch.vtensor<[4,8,96],f32>, !torch.list<int>, !torch.vtensor<[96],f32>, !torch.none, !torch.float, !torch.bool -> !torch.vtensor<[4,8,96],f32>
    return %2, %4, %7 : !torch.vtensor<[4,8,96],f32>, !torch.vtensor<[4,8,96],f32>, !torch.vtensor<[4,8,96],f32>
  }
}

{-#
  dialect_resources: {
    builtin: {
      torch_tensor_96_torch.float32: "0x04000000AC0A7F3F1855A23F75A6163FC0CC213F43B34E3F7E29913FC3767D3FB4BEB23F09A4743F6AEF903F1551593FF2D6663F24B7053F573A2B3F463C4B3FEC5E823F2C4D993FC666A63F3A39293FC142483FF33E973F1425B53F57A8653F57E4AF3F585E6B3FA8C5863F52F3B93F1942093F4D6B2F3F48985F3F091B4E3FCA4BB73F73082D3FD013453FF392263FC51E083FFE47353FA803B73FD88E9C3FE0049F3FA95D833F63603E3FECD38A3FB17C083FF382233F1D033E3F4A61A83F4A86A53F8E3B473FA7617B3F90EEA83FE09FBF3F8466993F5CA5883F40E9AA3F20A2343F10ED8B3FCAC21C3FF448273F97E03D3F52F59C3FFFBC993FCB2D343FB955933F5C22A33F1CD86F3F9171823F40D48E3F40B4A73FD273BD3F355C1D3F8517513F1327993FF406B53F7AB1B73F8878B83FA8BC8C3F84B1103F34E3853F2AEC2F3FBAB5083F10DDB83FBCA9B03F0151003FA0FA8B3FE76F6A3FA9EF6A3F3968453F929C983F662F343F3C76973F865DA03FD7D0AD3F29EE973F5B50013F80F72C3F",
      torch_tensor_96_torch.float32_1: "0x04000000C7F49F3F32658D3F35261C3F8C4B363F3C35BC3FD51FAB3F5430483FCBC85F3F4411063F06B37D3FC49B1F3F2F441D3F7FF2783FFA9B893F83944B3FE6F9A53F641B323F5A12BA3FF4DBAB3F4E0F143F8F24603F4AE3823F7256893FDD2D8F3F8C1D993F68D5833F8D8B413FBA489E3F5537053F3022343F31F55F3F45A6413FA938533FA316173FC0C5643F30AE8D3FC59C2C3F5E6E793F80D0AD3F71D7723F59C7813F24F5743FD1F38C3F98B1A83FAE9FBC3FC2A4A83F31C3BC3F2ABE763FCD030D3F7051433FF493AB3F952B7F3FC960403F7FE91D3F0036083F8AF7133F7209663F1619A33FDD99A23F7F8D043F0CECA73FBBD61B3F82F0643F79194C3F6258673F3EDE663FA3230D3FDE7A113F7BF86B3FE2D3803F52DA453FD71B983FE3CA0C3F945C773F6848B83F32CA4B3FCECAB93F872D973F297C0C3F1D7EA83FC13A713F24DC463F852DB33F5690183F16DE863F6833653F06B4AD3F81DD913F9AC09E3F289A963F2038613FB614653F8084163F93ADA23F8AD0B23F57CAAB3F"
    }
  }
#-}
