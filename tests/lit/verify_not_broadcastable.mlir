// RUN: not thunder-opt %s 2>&1 | filecheck %s
// ltorch.add of 2x3 and 4 tensors: the shapes do not broadcast, so the op is invalid.

// CHECK: error: 'ltorch.add' op invalid operands: The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 1
func.func @computation(%a: tensor<2x3xf32>, %b: tensor<4xf32>) -> tensor<2x3xf32> {
  %one = arith.constant 1 : i64
  %0 = "ltorch.add"(%a, %b, %one) : (tensor<2x3xf32>, tensor<4xf32>, i64) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
