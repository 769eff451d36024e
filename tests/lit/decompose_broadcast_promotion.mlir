// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-decompose)' | filecheck %s
// Mixed int/float operands with different ranks: decompose inserts convert_element_type and
// broadcast_in_dim on each side; true division of an int tensor goes to the default float dtype.

// CHECK-LABEL: func.func @promote
// CHECK-SAME: (%[[A:.*]]: tensor<4x1xi64>, %[[B:.*]]: tensor<3xf16>)
// CHECK: %[[A16:.*]] = "thunder.convert_element_type"(%[[A]]) {dtype = f16} : (tensor<4x1xi64>) -> tensor<4x1xf16>
// CHECK: %[[AB:.*]] = "thunder.broadcast_in_dim"(%[[A16]]) {broadcast_dims = array<i64: 0, 1>, shape = array<i64: 4, 3>} : (tensor<4x1xf16>) -> tensor<4x3xf16>
// CHECK: %[[BB:.*]] = "thunder.broadcast_in_dim"(%[[B]]) {broadcast_dims = array<i64: 1>, shape = array<i64: 4, 3>} : (tensor<3xf16>) -> tensor<4x3xf16>
// CHECK: %[[M:.*]] = "thunder.mul"(%[[AB]], %[[BB]]) : (tensor<4x3xf16>, tensor<4x3xf16>) -> tensor<4x3xf16>
// CHECK: %[[A32:.*]] = "thunder.convert_element_type"(%[[A]]) {dtype = f32} : (tensor<4x1xi64>) -> tensor<4x1xf32>
// CHECK: %[[HALF:.*]] = arith.constant 5.000000e-01 : f64
// CHECK: %[[D:.*]] = "thunder.div"(%[[A32]], %[[HALF]]) : (tensor<4x1xf32>, f64) -> tensor<4x1xf32>
// CHECK-NOT: ltorch.
// CHECK: return %[[M]], %[[D]]
func.func @promote(%a: tensor<4x1xi64>, %b: tensor<3xf16>) -> (tensor<4x3xf16>, tensor<4x1xf32>) {
  %f = arith.constant 0.5 : f64
  %0 = "ltorch.mul"(%a, %b) : (tensor<4x1xi64>, tensor<3xf16>) -> tensor<4x3xf16>
  %1 = "ltorch.true_divide"(%a, %f) : (tensor<4x1xi64>, f64) -> tensor<4x1xf32>
  return %0, %1 : tensor<4x3xf16>, tensor<4x1xf32>
}
