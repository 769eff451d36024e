// RUN: thunder-opt %s | filecheck %s
// A trace in the ltorch dialect parses, verifies and prints back unchanged.

// CHECK-LABEL: func.func @computation
// CHECK-SAME: (%[[A:.*]]: tensor<2x2xf32>, %[[B:.*]]: tensor<2x2xf32>) -> tensor<2x2xf32>
// CHECK: %[[ONE:.*]] = arith.constant 1 : i64
// CHECK: %[[R:.*]] = "ltorch.add"(%[[A]], %[[B]], %[[ONE]]) : (tensor<2x2xf32>, tensor<2x2xf32>, i64) -> tensor<2x2xf32>
// CHECK: return %[[R]]
func.func @computation(%a: tensor<2x2xf32>, %b: tensor<2x2xf32>) -> tensor<2x2xf32> {
  %one = arith.constant 1 : i64
  %0 = "ltorch.add"(%a, %b, %one) : (tensor<2x2xf32>, tensor<2x2xf32>, i64) -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}
