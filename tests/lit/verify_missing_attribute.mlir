// RUN: not thunder-opt %s 2>&1 | filecheck %s
// Every non-tensor parameter must be given as an attribute: transpose without dim1 fails to verify.

// CHECK: error: 'ltorch.transpose' op invalid operands: missing attribute 'dim1' (int)
func.func @computation(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %0 = "ltorch.transpose"(%a) {dim0 = 0 : i64} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}
