// RUN: thunder-opt %s --pass-pipeline='builtin.module(canonicalize)' | filecheck %s
// canonicalize erases unused Pure ops (ltorch.exp, a dead chain of prims) but keeps the unused
// random ltorch.dropout; unused constants disappear and equal constants are folded into one.

// CHECK-LABEL: func.func @dead
// CHECK-SAME: (%[[A:.*]]: tensor<4xf32>, %[[B:.*]]: tensor<4xf32>)
// CHECK-DAG: %[[TWO:.*]] = arith.constant 2.000000e+00 : f64
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1 : i64
// CHECK-NOT: arith.constant
// CHECK: %[[M0:.*]] = "ltorch.mul"(%[[A]], %[[TWO]])
// CHECK: %[[M1:.*]] = "ltorch.mul"(%[[B]], %[[TWO]])
// CHECK-NOT: ltorch.exp
// CHECK: "ltorch.dropout"(%[[A]])
// CHECK-NOT: thunder.
// CHECK: %[[R:.*]] = "ltorch.add"(%[[M0]], %[[M1]], %[[ONE]])
// CHECK-NEXT: return %[[R]]
func.func @dead(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %c2 = arith.constant 2.0 : f64
  %c2b = arith.constant 2.0 : f64
  %unused = arith.constant 7 : i64
  %one = arith.constant 1 : i64
  %0 = "ltorch.mul"(%a, %c2) : (tensor<4xf32>, f64) -> tensor<4xf32>
  %1 = "ltorch.mul"(%b, %c2b) : (tensor<4xf32>, f64) -> tensor<4xf32>
  %2 = "ltorch.exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %3 = "ltorch.dropout"(%a) {inplace = false, p = 5.000000e-01 : f64, training = true} : (tensor<4xf32>) -> tensor<4xf32>
  %4 = "thunder.neg"(%b) : (tensor<4xf32>) -> tensor<4xf32>
  %5 = "thunder.sum"(%4) {dims = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  %6 = "ltorch.add"(%0, %1, %one) : (tensor<4xf32>, tensor<4xf32>, i64) -> tensor<4xf32>
  return %6 : tensor<4xf32>
}
