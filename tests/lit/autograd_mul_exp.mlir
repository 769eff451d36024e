// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-autograd)' | filecheck %s
// exp(x * y): both inputs require grad. mul and exp have VJP rules, so @forward keeps them as
// ltorch ops and returns what @backward reads (exp's result, x and y); @backward computes
// g * exp(x * y) and multiplies it by the other factor for each input.

// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32> {thunder.requires_grad}, %[[Y:.*]]: tensor<4xf32> {thunder.requires_grad})
// CHECK-SAME: thunder.num_outputs = 1
// CHECK: %[[M:.*]] = "ltorch.mul"(%[[X]], %[[Y]])
// CHECK: %[[E:.*]] = "ltorch.exp"(%[[M]])
// CHECK-NOT: thunder.
// CHECK: return %[[E]], %[[E]], %[[Y]], %[[X]]

// CHECK-LABEL: func.func @backward
// CHECK-SAME: (%[[SE:.*]]: tensor<4xf32>, %[[SY:.*]]: tensor<4xf32>, %[[SX:.*]]: tensor<4xf32>, %[[G:.*]]: tensor<4xf32>)
// CHECK-SAME: thunder.cotangent_for = array<i64: 0>, thunder.grad_of = array<i64: 0, 1>
// CHECK: %[[GM:.*]] = "ltorch.mul"(%[[G]], %[[SE]])
// CHECK: %[[GX:.*]] = "ltorch.mul"(%[[GM]], %[[SY]])
// CHECK: %[[GY:.*]] = "ltorch.mul"(%[[GM]], %[[SX]])
// CHECK: return %[[GX]], %[[GY]] : tensor<4xf32>, tensor<4xf32>
func.func @computation(%arg0: tensor<4xf32> {thunder.requires_grad}, %arg1: tensor<4xf32> {thunder.requires_grad}) -> tensor<4xf32> {
  %0 = "ltorch.mul"(%arg0, %arg1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "ltorch.exp"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
