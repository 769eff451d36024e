// RUN: not thunder-opt %s --split-input-file 2>&1 | filecheck %s
// The meta function's own checks surface as verifier errors: softmax over dim 2 of a 2-d tensor,
// and unsqueeze at dim -4 of a 2-d tensor.

// CHECK: error: 'ltorch.softmax' op invalid operands: Dimension out of range (expected to be in range of [-2, 1], but got 2)
func.func @softmax_dim(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "ltorch.softmax"(%a) {_stacklevel = 3 : i64, dim = 2 : i64, dtype} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// CHECK: error: 'ltorch.unsqueeze' op invalid operands: Dimension out of range
func.func @unsqueeze_dim(%a: tensor<2x3xf32>) -> tensor<2x3x1xf32> {
  %0 = "ltorch.unsqueeze"(%a) {dim = -4 : i64} : (tensor<2x3xf32>) -> tensor<2x3x1xf32>
  return %0 : tensor<2x3x1xf32>
}
