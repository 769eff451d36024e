// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-decompose)' | filecheck %s
// ltorch.add with broadcasting and type promotion becomes explicit prims.

// CHECK-LABEL: func.func @computation
// CHECK: %[[A64:.*]] = "thunder.convert_element_type"(%arg0) {dtype = f64} : (tensor<2x3xf32>) -> tensor<2x3xf64>
// CHECK: %[[BB:.*]] = "thunder.broadcast_in_dim"(%arg1) {broadcast_dims = array<i64: 1>, shape = array<i64: 2, 3>} : (tensor<3xf64>) -> tensor<2x3xf64>
// CHECK: %[[R:.*]] = "thunder.add"(%[[A64]], %[[BB]])
// CHECK-NOT: ltorch.add
// CHECK: return %[[R]]
func.func @computation(%a: tensor<2x3xf32>, %b: tensor<3xf64>) -> tensor<2x3xf64> {
  %one = arith.constant 1 : i64
  %0 = "ltorch.add"(%a, %b, %one) : (tensor<2x3xf32>, tensor<3xf64>, i64) -> tensor<2x3xf64>
  return %0 : tensor<2x3xf64>
}
