// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-decompose)' | filecheck %s
// Shape ops lower to thunder.transpose (permute, transpose with a negative dim), thunder.reshape
// (flatten, unsqueeze, view with -1 resolved) and thunder.broadcast_in_dim (expand).

// CHECK-LABEL: func.func @shapes
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK: %[[P:.*]] = "thunder.transpose"(%[[X]]) {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
// CHECK: %[[T:.*]] = "thunder.transpose"(%[[X]]) {permutation = array<i64: 2, 1, 0>} : (tensor<2x3x4xf32>) -> tensor<4x3x2xf32>
// CHECK: %[[F:.*]] = "thunder.reshape"(%[[X]]) {shape = array<i64: 2, 12>} : (tensor<2x3x4xf32>) -> tensor<2x12xf32>
// CHECK: %[[U:.*]] = "thunder.reshape"(%[[X]]) {shape = array<i64: 2, 1, 3, 4>} : (tensor<2x3x4xf32>) -> tensor<2x1x3x4xf32>
// CHECK: %[[E:.*]] = "thunder.broadcast_in_dim"(%[[U]]) {broadcast_dims = array<i64: 0, 1, 2, 3>, shape = array<i64: 2, 5, 3, 4>} : (tensor<2x1x3x4xf32>) -> tensor<2x5x3x4xf32>
// CHECK: %[[V:.*]] = "thunder.reshape"(%[[X]]) {shape = array<i64: 24>} : (tensor<2x3x4xf32>) -> tensor<24xf32>
// CHECK-NOT: ltorch.
// CHECK: return %[[P]], %[[T]], %[[F]], %[[E]], %[[V]]
func.func @shapes(%x: tensor<2x3x4xf32>) -> (tensor<4x2x3xf32>, tensor<4x3x2xf32>, tensor<2x12xf32>, tensor<2x5x3x4xf32>, tensor<24xf32>) {
  %0 = "ltorch.permute"(%x) {dims = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %1 = "ltorch.transpose"(%x) {dim0 = 0 : i64, dim1 = -1 : i64} : (tensor<2x3x4xf32>) -> tensor<4x3x2xf32>
  %2 = "ltorch.flatten"(%x) {end_dim = -1 : i64, start_dim = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x12xf32>
  %3 = "ltorch.unsqueeze"(%x) {dim = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x1x3x4xf32>
  %4 = "ltorch.expand"(%3) {size = array<i64: -1, 5, -1, -1>} : (tensor<2x1x3x4xf32>) -> tensor<2x5x3x4xf32>
  %5 = "ltorch.view"(%x) {shape = array<i64: -1>} : (tensor<2x3x4xf32>) -> tensor<24xf32>
  return %0, %1, %2, %4, %5 : tensor<4x2x3xf32>, tensor<4x3x2xf32>, tensor<2x12xf32>, tensor<2x5x3x4xf32>, tensor<24xf32>
}
