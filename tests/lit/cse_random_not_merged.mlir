// RUN: thunder-opt %s --pass-pipeline='builtin.module(cse)' | filecheck %s
// Random ops (ltorch.dropout, thunder.uniform) are not Pure, so CSE keeps both copies, while the
// identical Pure ltorch.mul ops next to them are merged.

// CHECK-LABEL: func.func @random
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK: %[[D0:.*]] = "ltorch.dropout"(%[[X]]) {inplace = false, p = 5.000000e-01 : f64, training = true}
// CHECK: %[[D1:.*]] = "ltorch.dropout"(%[[X]]) {inplace = false, p = 5.000000e-01 : f64, training = true}
// CHECK: %[[U0:.*]] = "thunder.uniform"()
// CHECK: %[[U1:.*]] = "thunder.uniform"()
// CHECK: %[[M:.*]] = "ltorch.mul"(%[[D0]], %[[D1]])
// CHECK-NOT: "ltorch.mul"
// CHECK: return %[[D0]], %[[D1]], %[[U0]], %[[U1]], %[[M]], %[[M]]
func.func @random(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %0 = "ltorch.dropout"(%x) {inplace = false, p = 5.000000e-01 : f64, training = true} : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "ltorch.dropout"(%x) {inplace = false, p = 5.000000e-01 : f64, training = true} : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "thunder.uniform"() {device = "cpu", dtype = f32, high = 1.0 : f64, low = 0.0 : f64, shape = array<i64: 4>} : () -> tensor<4xf32>
  %3 = "thunder.uniform"() {device = "cpu", dtype = f32, high = 1.0 : f64, low = 0.0 : f64, shape = array<i64: 4>} : () -> tensor<4xf32>
  %4 = "ltorch.mul"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %5 = "ltorch.mul"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
