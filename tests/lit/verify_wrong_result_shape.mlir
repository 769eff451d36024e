// RUN: not thunder-opt %s 2>&1 | filecheck %s
// The verifier infers matmul's result shape from its operands: (2x3) @ (3x4) claimed as 2x3 is rejected,
// with the error at the op's line.

// CHECK: verify_wrong_result_shape.mlir:[[# @LINE + 3]]:8: error: 'ltorch.matmul' op result types (tensor<2x3xf32>) do not match the inferred types (tensor<2x4xf32>)
// CHECK-NOT: error
func.func @computation(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<2x3xf32> {
  %0 = "ltorch.matmul"(%a, %b) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
