// RUN: thunder-opt %s | filecheck %s
// scaled_dot_product_attention with and without the optional attn_mask slot; scale=None is a unit attribute.

// CHECK-LABEL: func.func @attention
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[K:.*]]: tensor<1x2x6x8xf32>, %[[V:.*]]: tensor<1x2x6x16xf32>, %[[M:.*]]: tensor<4x6xi1>)
// CHECK: %[[A:.*]] = "ltorch.scaled_dot_product_attention"(%[[Q]], %[[K]], %[[V]]) {dropout_p = 0.000000e+00 : f64, enable_gqa = false, is_causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale} : (tensor<1x2x4x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x16xf32>) -> tensor<1x2x4x16xf32>
// CHECK: %[[B:.*]] = "ltorch.scaled_dot_product_attention"(%[[Q]], %[[K]], %[[V]], %[[M]]) {dropout_p = 0.000000e+00 : f64, enable_gqa = false, is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 1.250000e-01 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x16xf32>, tensor<4x6xi1>) -> tensor<1x2x4x16xf32>
// CHECK: return %[[A]], %[[B]]
func.func @attention(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x6x8xf32>, %v: tensor<1x2x6x16xf32>, %m: tensor<4x6xi1>) -> (tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32>) {
  %0 = "ltorch.scaled_dot_product_attention"(%q, %k, %v) {dropout_p = 0.000000e+00 : f64, enable_gqa = false, is_causal = true, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale} : (tensor<1x2x4x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x16xf32>) -> tensor<1x2x4x16xf32>
  %1 = "ltorch.scaled_dot_product_attention"(%q, %k, %v, %m) {dropout_p = 0.000000e+00 : f64, enable_gqa = false, is_causal = false, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 0.125 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x16xf32>, tensor<4x6xi1>) -> tensor<1x2x4x16xf32>
  return %0, %1 : tensor<1x2x4x16xf32>, tensor<1x2x4x16xf32>
}
