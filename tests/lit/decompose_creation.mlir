// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-decompose)' | filecheck %s
// Creation ops lower to thunder.full / thunder.iota with dtype and device made explicit
// (a unit device becomes "cpu", a unit dtype the default for the fill value).

// CHECK-LABEL: func.func @creation
// CHECK: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f64
// CHECK: %[[Z:.*]] = "thunder.full"(%[[ZERO]]) {device = "cpu", dtype = f32, shape = array<i64: 2, 3>} : (f64) -> tensor<2x3xf32>
// CHECK: %[[A:.*]] = "thunder.iota"() {device = "cpu", dtype = i64, length = 3 : i64, start = 0 : i64, step = 1 : i64} : () -> tensor<3xi64>
// CHECK: %[[ONE:.*]] = arith.constant 1.000000e+00 : f64
// CHECK: %[[O:.*]] = "thunder.full"(%[[ONE]]) {device = "cpu", dtype = bf16, shape = array<i64: 2, 3>} : (f64) -> tensor<2x3xbf16>
// CHECK-NOT: ltorch.
// CHECK: return %[[Z]], %[[A]], %[[O]]
func.func @creation() -> (tensor<2x3xf32>, tensor<3xi64>, tensor<2x3xbf16>) {
  %0 = "ltorch.zeros"() {device, dtype = f32, requires_grad = false, size = array<i64: 2, 3>} : () -> tensor<2x3xf32>
  %c3 = arith.constant 3 : i64
  %c1 = arith.constant 1 : i64
  %1 = "ltorch.arange"(%c3, %c1) {device, dtype, operandSegmentSizes = array<i32: 1, 0, 1>, requires_grad = false} : (i64, i64) -> tensor<3xi64>
  %2 = "ltorch.ones_like"(%0) {device, dtype = bf16, memory_format, requires_grad = false} : (tensor<2x3xf32>) -> tensor<2x3xbf16>
  return %0, %1, %2 : tensor<2x3xf32>, tensor<3xi64>, tensor<2x3xbf16>
}
