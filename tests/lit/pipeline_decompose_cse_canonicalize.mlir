// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-decompose,cse,canonicalize)' | filecheck %s
// The full pipeline: ltorch ops become prims, CSE merges the identical pieces the two dropouts
// decompose into (but not their uniform draws), canonicalize drops the now-unused alpha constant
// and folds duplicate constants.

// CHECK-LABEL: func.func @computation
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>, %[[Y:.*]]: tensor<4xf32>)
// CHECK-DAG: %[[P:.*]] = arith.constant 5.000000e-01 : f64
// CHECK-DAG: %[[S:.*]] = arith.constant 2.000000e+00 : f64
// CHECK-DAG: %[[Z:.*]] = arith.constant 0.000000e+00 : f64
// CHECK-NOT: arith.constant
// CHECK: %[[U0:.*]] = "thunder.uniform"()
// CHECK: %[[K0:.*]] = "thunder.lt"(%[[U0]], %[[P]])
// CHECK: %[[XS:.*]] = "thunder.mul"(%[[X]], %[[S]])
// CHECK: %[[D0:.*]] = "thunder.where"(%[[K0]], %[[XS]], %[[Z]])
// CHECK: %[[U1:.*]] = "thunder.uniform"()
// CHECK: %[[K1:.*]] = "thunder.lt"(%[[U1]], %[[P]])
// CHECK-NOT: "thunder.mul"(%[[X]], %[[S]])
// CHECK: %[[D1:.*]] = "thunder.where"(%[[K1]], %[[XS]], %[[Z]])
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
