// RUN: thunder-opt %s --split-input-file --pass-pipeline='builtin.module(thunder-autograd)' | filecheck %s
// sdpa on CUDA tensors trains as impl.sdpa_flash (torch's flash or memory-efficient kernel,
// chosen on the device): @forward saves the output and the logsumexp of each row, @backward
// calls the fused backward kernel. No [B, H, L, S] scores or probabilities anywhere (the
// decomposed backward materialized them in float32). f64 has no fused CUDA kernel: decomposed.

// CHECK-LABEL: func.func @forward
// CHECK-NOT: 128x128
// CHECK: "ltorch.sdpa_flash"({{.*}}) {is_causal = true{{.*}} -> (tensor<2x4x128x64xbf16, "cuda:0">, tensor<2x4x128xf32, "cuda:0">)
// CHECK-NOT: 128x128
// CHECK: return
// CHECK-LABEL: func.func @backward
// CHECK-NOT: 128x128
// CHECK: "ltorch.sdpa_flash_backward"
// CHECK-NOT: 128x128
// CHECK: return
func.func @computation(%q: tensor<2x4x128x64xbf16, "cuda:0"> {thunder.requires_grad}, %k: tensor<2x4x128x64xbf16, "cuda:0"> {thunder.requires_grad}, %v: tensor<2x4x128x64xbf16, "cuda:0"> {thunder.requires_grad}) -> tensor<2x4x128x64xbf16, "cuda:0"> {
  %0 = "ltorch.scaled_dot_product_attention"(%q, %k, %v) {dropout_p = 0.000000e+00 : f64, enable_gqa = false, is_causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale} : (tensor<2x4x128x64xbf16, "cuda:0">, tensor<2x4x128x64xbf16, "cuda:0">, tensor<2x4x128x64xbf16, "cuda:0">) -> tensor<2x4x128x64xbf16, "cuda:0">
  return %0 : tensor<2x4x128x64xbf16, "cuda:0">
}

// -----

// CHECK-LABEL: func.func @forward
// CHECK-NOT: sdpa_flash
// CHECK: "ltorch.scaled_dot_product_attention"
// CHECK-LABEL: func.func @backward
// CHECK-NOT: sdpa_flash
// CHECK: "ltorch.softmax"({{.*}}) -> tensor<1x2x16x16xf64, "cuda:0">
func.func @computation(%q: tensor<1x2x16x8xf64, "cuda:0"> {thunder.requires_grad}, %k: tensor<1x2x16x8xf64, "cuda:0"> {thunder.requires_grad}, %v: tensor<1x2x16x8xf64, "cuda:0"> {thunder.requires_grad}) -> tensor<1x2x16x8xf64, "cuda:0"> {
  %0 = "ltorch.scaled_dot_product_attention"(%q, %k, %v) {dropout_p = 0.000000e+00 : f64, enable_gqa = false, is_causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale} : (tensor<1x2x16x8xf64, "cuda:0">, tensor<1x2x16x8xf64, "cuda:0">, tensor<1x2x16x8xf64, "cuda:0">) -> tensor<1x2x16x8xf64, "cuda:0">
  return %0 : tensor<1x2x16x8xf64, "cuda:0">
}
