// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-decompose)' | filecheck %s
// linear transposes the weight and broadcasts it over the batch; matmul with a vector reshapes it
// to a column, matmuls and reshapes the result back.

// CHECK-LABEL: func.func @mm
// CHECK-SAME: (%[[X:.*]]: tensor<5x2x3xf32>, %[[W:.*]]: tensor<4x3xf32>, %[[V:.*]]: tensor<3xf32>)
// CHECK: %[[WT:.*]] = "thunder.transpose"(%[[W]]) {permutation = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
// CHECK: %[[WB:.*]] = "thunder.broadcast_in_dim"(%[[WT]]) {broadcast_dims = array<i64: 1, 2>, shape = array<i64: 5, 3, 4>} : (tensor<3x4xf32>) -> tensor<5x3x4xf32>
// CHECK: %[[L:.*]] = "thunder.matmul"(%[[X]], %[[WB]]) : (tensor<5x2x3xf32>, tensor<5x3x4xf32>) -> tensor<5x2x4xf32>
// CHECK: %[[VC:.*]] = "thunder.reshape"(%[[V]]) {shape = array<i64: 3, 1>} : (tensor<3xf32>) -> tensor<3x1xf32>
// CHECK: %[[VB:.*]] = "thunder.broadcast_in_dim"(%[[VC]])
// CHECK: %[[MV:.*]] = "thunder.matmul"(%[[X]], %[[VB]]) : (tensor<5x2x3xf32>, tensor<5x3x1xf32>) -> tensor<5x2x1xf32>
// CHECK: %[[R:.*]] = "thunder.reshape"(%[[MV]]) {shape = array<i64: 5, 2>} : (tensor<5x2x1xf32>) -> tensor<5x2xf32>
// CHECK-NOT: ltorch.
// CHECK: return %[[L]], %[[R]]
func.func @mm(%x: tensor<5x2x3xf32>, %w: tensor<4x3xf32>, %v: tensor<3xf32>) -> (tensor<5x2x4xf32>, tensor<5x2xf32>) {
  %0 = "ltorch.linear"(%x, %w) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<5x2x3xf32>, tensor<4x3xf32>) -> tensor<5x2x4xf32>
  %1 = "ltorch.matmul"(%x, %v) : (tensor<5x2x3xf32>, tensor<3xf32>) -> tensor<5x2xf32>
  return %0, %1 : tensor<5x2x4xf32>, tensor<5x2xf32>
}
