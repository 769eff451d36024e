// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-decompose,cse,canonicalize)' | filecheck %s
// The full pipeline: ltorch ops become prims, CSE merges the identical pieces the two dropouts
// decompose into (the scale constant) but not their random masks, canonicalize drops the
// now-unused alpha constant and the dead exp.

// CHECK-LABEL: func.func @computation
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>, %[[Y:.*]]: tensor<4xf32>)
// CHECK: %[[S:.*]] = arith.constant 2.000000e+00 : f64
// CHECK-NOT: arith.constant
// CHECK: %[[K0:.*]] = "thunder.bernoulli_mask"() {device = "cpu", p = 5.000000e-01 : f64, shape = array<i64: 4>}
// CHECK: %[[F0:.*]] = "thunder.convert_element_type"(%[[K0]]) {dtype = f32}
// CHECK: %[[M0:.*]] = "thunder.mul"(%[[X]], %[[F0]])
// CHECK: %[[D0:.*]] = "thunder.mul"(%[[M0]], %[[S]])
// CHECK: %[[K1:.*]] = "thunder.bernoulli_mask"()
// CHECK: %[[F1:.*]] = "thunder.convert_element_type"(%[[K1]]) {dtype = f32}
// CHECK: %[[M1:.*]] = "thunder.mul"(%[[X]], %[[F1]])
// CHECK: %[[D1:.*]] = "thunder.mul"(%[[M1]], %[[S]])
// CHECK: %[[A:.*]] = "thunder.add"(%[[D0]], %[[D1]])
// CHECK-NOT: ltorch.
// CHECK-NOT: thunder.exp
// CHECK: return %[[A]]
func.func @computation(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %one = arith.constant 1 : i64
  %0 = "ltorch.dropout"(%x) {inplace = false, p = 5.000000e-01 : f64, training = true} : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "ltorch.dropout"(%x) {inplace = false, p = 5.000000e-01 : f64, training = true} : (tensor<4xf32>) -> tensor<4xf32>
  %dead = "ltorch.exp"(%y) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "ltorch.add"(%0, %1, %one) : (tensor<4xf32>, tensor<4xf32>, i64) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}
