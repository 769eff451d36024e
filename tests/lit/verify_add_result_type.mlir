// RUN: not thunder-opt %s 2>&1 | filecheck %s
// The verifier runs the op's meta function: a result type that disagrees with broadcasting
// and type promotion is rejected.

// CHECK: error: 'ltorch.add' op result types (tensor<2x3xf32>) do not match the inferred types (tensor<2x3xf64>)
func.func @computation(%a: tensor<2x3xf32>, %b: tensor<3xf64>) -> tensor<2x3xf32> {
  %one = arith.constant 1 : i64
  %0 = "ltorch.add"(%a, %b, %one) : (tensor<2x3xf32>, tensor<3xf64>, i64) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
