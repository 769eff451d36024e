// RUN: not thunder-opt %s --split-input-file 2>&1 | filecheck %s
// Operands are checked against their parameter's kind: a tensor where the op wants a number
// (ltorch.add's alpha, which add's shape rule never reads), or a number where it wants a tensor.

// CHECK: 7:8: error: 'ltorch.add' op invalid operands: operand 'alpha' (Number) must be a number, not a value of type tensor<4xf32>
func.func @tensor_for_number(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "ltorch.add"(%a, %b, %b) : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// CHECK: 16:8: error: 'ltorch.exp' op invalid operands: operand 'input' (Tensor) must be a tensor, not a value of type f64
func.func @number_for_tensor() -> tensor<f32> {
  %c = arith.constant 2.0 : f64
  %0 = "ltorch.exp"(%c) : (f64) -> tensor<f32>
  return %0 : tensor<f32>
}
