// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-decompose)' | filecheck %s
// getitem becomes thunder.slice (ints as length-1 slices, negative ints wrapped, steps as strides)
// followed by a reshape that drops int-indexed dims and inserts None dims.

// CHECK-LABEL: func.func @getitem
// CHECK-SAME: (%[[X:.*]]: tensor<4x5xf32>)
// CHECK: %[[S0:.*]] = "thunder.slice"(%[[X]]) {end_indices = array<i64: 1, 3>, start_indices = array<i64: 0, 1>, strides = array<i64: 1, 1>} : (tensor<4x5xf32>) -> tensor<1x2xf32>
// CHECK: %[[R0:.*]] = "thunder.reshape"(%[[S0]]) {shape = array<i64: 2>} : (tensor<1x2xf32>) -> tensor<2xf32>
// CHECK: %[[S1:.*]] = "thunder.slice"(%[[X]]) {end_indices = array<i64: 4, 5>, start_indices = array<i64: 0, 0>, strides = array<i64: 1, 2>} : (tensor<4x5xf32>) -> tensor<4x3xf32>
// CHECK: %[[R1:.*]] = "thunder.reshape"(%[[S1]]) {shape = array<i64: 4, 1, 3>} : (tensor<4x3xf32>) -> tensor<4x1x3xf32>
// CHECK: %[[S2:.*]] = "thunder.slice"(%[[X]]) {end_indices = array<i64: 4, 5>, start_indices = array<i64: 3, 0>, strides = array<i64: 1, 1>} : (tensor<4x5xf32>) -> tensor<1x5xf32>
// CHECK: %[[R2:.*]] = "thunder.reshape"(%[[S2]]) {shape = array<i64: 5>} : (tensor<1x5xf32>) -> tensor<5xf32>
// CHECK-NOT: ltorch.getitem
// CHECK: return %[[R0]], %[[R1]], %[[R2]]
func.func @getitem(%x: tensor<4x5xf32>) -> (tensor<2xf32>, tensor<4x1x3xf32>, tensor<5xf32>) {
  %0 = "ltorch.getitem"(%x) {key = [0, {start = 1 : i64, stop = 3 : i64}]} : (tensor<4x5xf32>) -> tensor<2xf32>
  %1 = "ltorch.getitem"(%x) {key = ["...", unit, {step = 2 : i64}]} : (tensor<4x5xf32>) -> tensor<4x1x3xf32>
  %2 = "ltorch.getitem"(%x) {key = [-1]} : (tensor<4x5xf32>) -> tensor<5xf32>
  return %0, %1, %2 : tensor<2xf32>, tensor<4x1x3xf32>, tensor<5xf32>
}
