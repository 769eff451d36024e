// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-autograd)' | filecheck %s
// sum(linear(x, w, b)): linear has a VJP rule, so it is not decomposed: @forward runs
// ltorch.linear and saves x and w; @backward computes g @ w for x, g^T @ x for w and the
// cotangent summed over the batch dim for b.

// CHECK-LABEL: func.func @forward
// CHECK-NOT: thunder.matmul
// CHECK: "ltorch.linear"
// CHECK-NOT: thunder.
// CHECK: return

// CHECK-LABEL: func.func @backward
// CHECK-SAME: (%[[W:.*]]: tensor<3x4xf32>, %[[X:.*]]: tensor<2x4xf32>, %[[G:.*]]: tensor<f32>)
// CHECK-SAME: -> (tensor<2x4xf32>, tensor<3x4xf32>, tensor<3xf32>)
// CHECK: %[[GO:.*]] = "ltorch.expand"
// CHECK: %[[GX:.*]] = "ltorch.matmul"(%[[GO]], %[[W]]) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
// CHECK: %[[GT:.*]] = "ltorch.transpose"(%[[GO]])
// CHECK: %[[GW:.*]] = "ltorch.matmul"(%[[GT]], %[[X]]) : (tensor<3x2xf32>, tensor<2x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[GB:.*]] = "ltorch.sum"(%[[GO]]) {dim = array<i64: 0>
// CHECK: return %[[GX]], %[[GW]], %[[GB]]
func.func @computation(%arg0: tensor<2x4xf32> {thunder.requires_grad}, %arg1: tensor<3x4xf32> {thunder.requires_grad}, %arg2: tensor<3xf32> {thunder.requires_grad}) -> tensor<f32> {
  %0 = "ltorch.linear"(%arg0, %arg1, %arg2) {operandSegmentSizes = array<i32: 1, 1, 1>} : (tensor<2x4xf32>, tensor<3x4xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %1 = "ltorch.sum"(%0) {dim, dtype, keepdim = false} : (tensor<2x3xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}
