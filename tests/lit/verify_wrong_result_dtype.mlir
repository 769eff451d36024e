// RUN: not thunder-opt %s 2>&1 | filecheck %s
// Type promotion is checked: i64 tensor * f32 tensor is f32, so a claimed i64 result is rejected.

// CHECK: error: 'ltorch.mul' op result types (tensor<4xi64>) do not match the inferred types (tensor<4xf32>)
func.func @computation(%a: tensor<4xi64>, %b: tensor<4xf32>) -> tensor<4xi64> {
  %0 = "ltorch.mul"(%a, %b) : (tensor<4xi64>, tensor<4xf32>) -> tensor<4xi64>
  return %0 : tensor<4xi64>
}
