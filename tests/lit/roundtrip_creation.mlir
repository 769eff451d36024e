// RUN: thunder-opt %s | filecheck %s
// Creation ops: size as array<i64>, dtype as a type attribute, device as a string (unit = default);
// a non-cpu device shows up as the tensor type's encoding.

// CHECK-LABEL: func.func @creation
// CHECK: %[[Z:.*]] = "ltorch.zeros"() {device, dtype = f32, requires_grad = false, size = array<i64: 2, 3>} : () -> tensor<2x3xf32>
// CHECK: "ltorch.ones"() {device = "cuda:0", dtype = bf16, requires_grad = false, size = array<i64: 3>} : () -> tensor<3xbf16, "cuda:0">
// CHECK: %[[FV:.*]] = arith.constant 2.000000e+00 : f64
// CHECK: "ltorch.full"(%[[FV]]) {device, dtype, requires_grad = false, size = array<i64: 2, 3>} : (f64) -> tensor<2x3xf32>
// CHECK: %[[SEVEN:.*]] = arith.constant 7 : i64
// CHECK: "ltorch.full"(%[[SEVEN]]) {device, dtype, requires_grad = false, size = array<i64: 4>} : (i64) -> tensor<4xi64>
// CHECK: "ltorch.arange"(%{{.*}}, %{{.*}}) {device, dtype, operandSegmentSizes = array<i32: 1, 0, 1>, requires_grad = false} : (i64, i64) -> tensor<3xi64>
// CHECK: "ltorch.zeros_like"(%[[Z]]) {device, dtype = i32, memory_format, requires_grad = false} : (tensor<2x3xf32>) -> tensor<2x3xi32>
func.func @creation() -> (tensor<2x3xf32>, tensor<3xbf16, "cuda:0">, tensor<2x3xf32>, tensor<4xi64>, tensor<3xi64>, tensor<2x3xi32>) {
  %0 = "ltorch.zeros"() {device, dtype = f32, requires_grad = false, size = array<i64: 2, 3>} : () -> tensor<2x3xf32>
  %1 = "ltorch.ones"() {device = "cuda:0", dtype = bf16, requires_grad = false, size = array<i64: 3>} : () -> tensor<3xbf16, "cuda:0">
  %cst = arith.constant 2.0 : f64
  %2 = "ltorch.full"(%cst) {device, dtype, requires_grad = false, size = array<i64: 2, 3>} : (f64) -> tensor<2x3xf32>
  %seven = arith.constant 7 : i64
  %3 = "ltorch.full"(%seven) {device, dtype, requires_grad = false, size = array<i64: 4>} : (i64) -> tensor<4xi64>
  %c3 = arith.constant 3 : i64
  %c1 = arith.constant 1 : i64
  %4 = "ltorch.arange"(%c3, %c1) {device, dtype, operandSegmentSizes = array<i32: 1, 0, 1>, requires_grad = false} : (i64, i64) -> tensor<3xi64>
  %5 = "ltorch.zeros_like"(%0) {device, dtype = i32, memory_format, requires_grad = false} : (tensor<2x3xf32>) -> tensor<2x3xi32>
  return %0, %1, %2, %3, %4, %5 : tensor<2x3xf32>, tensor<3xbf16, "cuda:0">, tensor<2x3xf32>, tensor<4xi64>, tensor<3xi64>, tensor<2x3xi32>
}
