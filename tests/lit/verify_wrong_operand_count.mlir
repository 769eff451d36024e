// RUN: not thunder-opt %s --split-input-file 2>&1 | filecheck %s
// Operand counts come from the signature: a unary op with two operands and a binary op with one
// are rejected by the IRDL verifier.

// CHECK: error: {{.*}}expects exactly 1 operands, but got 2
// CHECK: note: see current operation: %0 = "ltorch.neg"
func.func @too_many(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "ltorch.neg"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// CHECK: error: {{.*}}expects exactly 2 operands, but got 1
// CHECK: note: see current operation: %0 = "thunder.mul"
func.func @too_few(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.mul"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
