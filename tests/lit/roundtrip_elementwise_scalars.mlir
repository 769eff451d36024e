// RUN: thunder-opt %s | filecheck %s
// Elementwise ltorch ops with tensor, f64 and i64 constant operands (and an i1 comparison result) round-trip.

// CHECK-LABEL: func.func @elementwise
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>, %[[Y:.*]]: tensor<2x3xf32>, %[[I:.*]]: tensor<3xi64>)
// CHECK-DAG: %[[F:.*]] = arith.constant 2.500000e+00 : f64
// CHECK-DAG: %[[THREE:.*]] = arith.constant 3 : i64
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1 : i64
// CHECK: %[[A:.*]] = "ltorch.add"(%[[X]], %[[F]], %[[ONE]]) : (tensor<2x3xf32>, f64, i64) -> tensor<2x3xf32>
// CHECK: %[[M:.*]] = "ltorch.mul"(%[[A]], %[[Y]]) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK: %[[S:.*]] = "ltorch.sub"(%[[M]], %[[THREE]], %[[ONE]]) : (tensor<2x3xf32>, i64, i64) -> tensor<2x3xf32>
// CHECK: %[[E:.*]] = "ltorch.exp"(%[[S]]) : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK: %[[G:.*]] = "ltorch.gt"(%[[E]], %[[F]]) : (tensor<2x3xf32>, f64) -> tensor<2x3xi1>
// CHECK: %[[W:.*]] = "ltorch.where"(%[[G]], %[[E]], %[[I]]) : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xi64>) -> tensor<2x3xf32>
// CHECK: %[[D:.*]] = "ltorch.div"(%[[I]], %[[THREE]]) {rounding_mode = "floor"} : (tensor<3xi64>, i64) -> tensor<3xi64>
// CHECK: return %[[W]], %[[D]]
func.func @elementwise(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>, %i: tensor<3xi64>) -> (tensor<2x3xf32>, tensor<3xi64>) {
  %f = arith.constant 2.5 : f64
  %three = arith.constant 3 : i64
  %one = arith.constant 1 : i64
  %0 = "ltorch.add"(%x, %f, %one) : (tensor<2x3xf32>, f64, i64) -> tensor<2x3xf32>
  %1 = "ltorch.mul"(%0, %y) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = "ltorch.sub"(%1, %three, %one) : (tensor<2x3xf32>, i64, i64) -> tensor<2x3xf32>
  %3 = "ltorch.exp"(%2) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = "ltorch.gt"(%3, %f) : (tensor<2x3xf32>, f64) -> tensor<2x3xi1>
  %5 = "ltorch.where"(%4, %3, %i) : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xi64>) -> tensor<2x3xf32>
  %6 = "ltorch.div"(%i, %three) {rounding_mode = "floor"} : (tensor<3xi64>, i64) -> tensor<3xi64>
  return %5, %6 : tensor<2x3xf32>, tensor<3xi64>
}
