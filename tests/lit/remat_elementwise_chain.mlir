// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-autograd)' | filecheck %s --check-prefix=AD
// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-autograd,thunder-remat)' | filecheck %s
// tanh(exp(sin(x @ w))): without remat @forward saves tanh's, exp's and the matmul's results
// besides the inputs (6 results); thunder-remat saves only the matmul result (not recomputed:
// it is expensive) and recomputes sin, exp and tanh in @backward (4 results).

// AD-LABEL: func.func @forward
// AD-SAME: -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<4x3xf32>, tensor<2x4xf32>)

// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[X:.*]]: tensor<2x4xf32> {thunder.requires_grad}, %[[W:.*]]: tensor<4x3xf32> {thunder.requires_grad})
// CHECK-SAME: -> (tensor<2x3xf32>, tensor<2x4xf32>, tensor<4x3xf32>, tensor<2x3xf32>)
// CHECK: %[[MM:.*]] = "ltorch.matmul"(%[[X]], %[[W]])
// CHECK: %[[T:.*]] = "ltorch.tanh"
// CHECK: return %[[T]], %[[X]], %[[W]], %[[MM]]

// CHECK-LABEL: func.func @backward
// CHECK-SAME: (%[[SX:.*]]: tensor<2x4xf32>, %[[SW:.*]]: tensor<4x3xf32>, %[[SMM:.*]]: tensor<2x3xf32>, %[[G:.*]]: tensor<2x3xf32>)
// CHECK-NOT: ltorch.matmul"(%[[SX]], %[[SW]])
// CHECK: %[[S:.*]] = "thunder.sin"(%[[SMM]])
// CHECK: %[[E:.*]] = "ltorch.exp"(%[[S]])
// CHECK: %[[T2:.*]] = "ltorch.tanh"(%[[E]])
// CHECK: "ltorch.mul"(%[[T2]], %[[T2]])
// CHECK: "thunder.cos"(%[[SMM]])
// CHECK: "ltorch.matmul"
// CHECK: return
func.func @computation(%arg0: tensor<2x4xf32> {thunder.requires_grad}, %arg1: tensor<4x3xf32> {thunder.requires_grad}) -> tensor<2x3xf32> {
  %0 = "ltorch.matmul"(%arg0, %arg1) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %1 = "ltorch.sin"(%0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = "ltorch.exp"(%1) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = "ltorch.tanh"(%2) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %3 : tensor<2x3xf32>
}
