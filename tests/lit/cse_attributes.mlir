// RUN: thunder-opt %s --pass-pipeline='builtin.module(cse)' | filecheck %s
// CSE merges ops only when operands and attributes match: the two sums over dim 0 merge, the sum
// over dim 1 stays; identical prims (and their constant operands) merge too.

// CHECK-LABEL: func.func @attrs
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>)
// CHECK: %[[S0:.*]] = "ltorch.sum"(%[[X]]) {dim = array<i64: 0>, dtype, keepdim = false}
// CHECK-NOT: {dim = array<i64: 0>
// CHECK: %[[S1:.*]] = "ltorch.sum"(%[[X]]) {dim = array<i64: 1>, dtype, keepdim = false}
// CHECK: %[[C:.*]] = arith.constant 2.000000e+00 : f64
// CHECK: %[[P:.*]] = "thunder.mul"(%[[S0]], %[[C]]) : (tensor<3xf32>, f64) -> tensor<3xf32>
// CHECK-NOT: "thunder.mul"
// CHECK-NOT: arith.constant
// CHECK: return %[[S0]], %[[S0]], %[[S1]], %[[P]], %[[P]]
func.func @attrs(%x: tensor<2x3xf32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<2xf32>, tensor<3xf32>, tensor<3xf32>) {
  %0 = "ltorch.sum"(%x) {dim = array<i64: 0>, dtype, keepdim = false} : (tensor<2x3xf32>) -> tensor<3xf32>
  %1 = "ltorch.sum"(%x) {dim = array<i64: 0>, dtype, keepdim = false} : (tensor<2x3xf32>) -> tensor<3xf32>
  %2 = "ltorch.sum"(%x) {dim = array<i64: 1>, dtype, keepdim = false} : (tensor<2x3xf32>) -> tensor<2xf32>
  %c = arith.constant 2.0 : f64
  %3 = "thunder.mul"(%0, %c) : (tensor<3xf32>, f64) -> tensor<3xf32>
  %c2 = arith.constant 2.0 : f64
  %4 = "thunder.mul"(%1, %c2) : (tensor<3xf32>, f64) -> tensor<3xf32>
  return %0, %1, %2, %3, %4 : tensor<3xf32>, tensor<3xf32>, tensor<2xf32>, tensor<3xf32>, tensor<3xf32>
}
