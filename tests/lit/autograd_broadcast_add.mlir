// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-autograd)' | filecheck %s
// sum(x + b, 0) with both inputs requiring grad: b was broadcast from 4 to 3x4, so its
// cotangent is summed back over the broadcast dim (sum_to_shape).

// CHECK-LABEL: func.func @backward
// CHECK-SAME: (%[[G:.*]]: tensor<4xf32>) -> (tensor<3x4xf32>, tensor<4xf32>)
// CHECK-SAME: thunder.grad_of = array<i64: 0, 1>
// CHECK: %[[R:.*]] = "ltorch.reshape"(%[[G]])
// CHECK: %[[GX:.*]] = "ltorch.expand"(%[[R]]) {size = array<i64: 3, 4>}
// CHECK: %[[GB:.*]] = "ltorch.sum"(%[[GX]]) {dim = array<i64: 0>, dtype, keepdim = false} : (tensor<3x4xf32>) -> tensor<4xf32>
// CHECK: return %[[GX]], %[[GB]] : tensor<3x4xf32>, tensor<4xf32>
func.func @computation(%arg0: tensor<3x4xf32> {thunder.requires_grad}, %arg1: tensor<4xf32> {thunder.requires_grad}) -> tensor<4xf32> {
  %c1_i64 = arith.constant 1 : i64
  %0 = "ltorch.add"(%arg0, %arg1, %c1_i64) : (tensor<3x4xf32>, tensor<4xf32>, i64) -> tensor<3x4xf32>
  %1 = "ltorch.sum"(%0) {dim = 0 : i64, dtype, keepdim = false} : (tensor<3x4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
