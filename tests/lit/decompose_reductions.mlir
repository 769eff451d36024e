// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-decompose)' | filecheck %s
// Reductions become reduction prims over explicit dims: keepdim adds a reshape, mean divides the
// sum by the element count, amax with an int dim reduces that one dim.

// CHECK-LABEL: func.func @reductions
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>)
// CHECK: %[[S:.*]] = "thunder.sum"(%[[X]]) {dims = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
// CHECK: %[[K:.*]] = "thunder.reshape"(%[[S]]) {shape = array<i64: 1, 3>} : (tensor<3xf32>) -> tensor<1x3xf32>
// CHECK: %[[MX:.*]] = "thunder.amax"(%[[X]]) {dims = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
// CHECK: %[[ALL:.*]] = "thunder.sum"(%[[X]]) {dims = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<f32>
// CHECK: %[[N:.*]] = arith.constant 6.000000e+00 : f64
// CHECK: %[[MEAN:.*]] = "thunder.div"(%[[ALL]], %[[N]]) : (tensor<f32>, f64) -> tensor<f32>
// CHECK-NOT: ltorch.
// CHECK: return %[[K]], %[[MX]], %[[MEAN]]
func.func @reductions(%x: tensor<2x3xf32>) -> (tensor<1x3xf32>, tensor<2xf32>, tensor<f32>) {
  %0 = "ltorch.sum"(%x) {dim = array<i64: 0>, dtype, keepdim = true} : (tensor<2x3xf32>) -> tensor<1x3xf32>
  %1 = "ltorch.amax"(%x) {dim = 1 : i64, keepdim = false} : (tensor<2x3xf32>) -> tensor<2xf32>
  %2 = "ltorch.mean"(%x) {dim, dtype, keepdim = false} : (tensor<2x3xf32>) -> tensor<f32>
  return %0, %1, %2 : tensor<1x3xf32>, tensor<2xf32>, tensor<f32>
}
