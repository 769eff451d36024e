// RUN: not thunder-opt %s --split-input-file 2>&1 | filecheck %s
// The verifier of ltorch.torch_call runs the callable on meta tensors of the operand types: a
// claimed result type torch does not give, a name that is no torch callable, arguments that
// are not literals, and a random callable recorded as the Pure torch_call are rejected.

// CHECK: error: 'ltorch.torch_call' op result types (tensor<3x4xf32>) do not match the inferred types (tensor<3x4xf64>)
func.func @wrong_dtype(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %0 = "ltorch.torch_call"(%x) {args = "_0, 1, dtype=torch.float64", autocast, callable = "torch.cumprod", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, shapes, strides} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// -----

// CHECK: error: 'ltorch.torch_call' op invalid operands: {{.*}}no_such_function
func.func @unknown_callable(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %0 = "ltorch.torch_call"(%x) {args = "_0", autocast, callable = "torch.no_such_function", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, shapes, strides} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// -----

// CHECK: error: 'ltorch.torch_call' op invalid operands: unsupported expression 'print(1)' in the arguments
func.func @not_a_literal(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %0 = "ltorch.torch_call"(%x) {args = "_0, print(1)", autocast, callable = "torch.cumprod", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, shapes, strides} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}

// -----

// CHECK: error: 'ltorch.torch_call' op invalid operands: torch.rrelu draws random numbers: it is recorded as ltorch.torch_call_random
func.func @random_as_pure(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %0 = "ltorch.torch_call"(%x) {args = "_0, 0.125, 0.25, True", autocast, callable = "torch.rrelu", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, shapes, strides} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}
