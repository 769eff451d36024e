// RUN: thunder-opt %s --to-python | filecheck %s
// --to-python prints each func as the Python program the torch executor runs: scalar constants
// inline, attributes as positional arguments, several results unpacked, each intermediate
// deleted after its last use.

// CHECK-LABEL: def computation(t0, t1, t2):
// CHECK-NEXT: # t0: cpu float32[2, 3]
// CHECK-NEXT: # t1: cpu float32[4, 3]
// CHECK-NEXT: # t2: cpu float32[4]
// CHECK-NEXT: t3 = torch.add(t0, 2.5)  # cpu float32[2, 3]
// CHECK-NEXT: t4 = torch.nn.functional.linear(t3, t1, t2)  # cpu float32[2, 4]
// CHECK-NEXT: del t3
// CHECK-NEXT: t5 = torch.softmax(t4, -1, None)  # cpu float32[2, 4]
// CHECK-NEXT: del t4
// CHECK-NEXT: t6 = torch.matmul(t5, t1)  # cpu float32[2, 3]
// CHECK-NEXT: del t5
// CHECK-NEXT: t7 = torch.nn.functional.layer_norm(t6, (3,), None, None, 1e-05)  # cpu float32[2, 3]
// CHECK-NEXT: del t6
// CHECK-NEXT: t8, t9 = torch.split(t7, 2, 1)  # cpu float32[2, 2], cpu float32[2, 1]
// CHECK-NEXT: del t7
// CHECK-NEXT: t10 = torch.sum(t8, (0,), True)  # cpu float32[1, 2]
// CHECK-NEXT: del t8
// CHECK-NEXT: return (t10, t9)
func.func @computation(%x: tensor<2x3xf32>, %w: tensor<4x3xf32>, %b: tensor<4xf32>) -> (tensor<1x2xf32>, tensor<2x1xf32>) {
  %f = arith.constant 2.5 : f64
  %one = arith.constant 1 : i64
  %a = "ltorch.add"(%x, %f, %one) : (tensor<2x3xf32>, f64, i64) -> tensor<2x3xf32>
  %0 = "ltorch.linear"(%a, %w, %b) {operandSegmentSizes = array<i32: 1, 1, 1>} : (tensor<2x3xf32>, tensor<4x3xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %1 = "ltorch.softmax"(%0) {_stacklevel = 3 : i64, dim = -1 : i64, dtype} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %2 = "ltorch.matmul"(%1, %w) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %3 = "ltorch.layer_norm"(%2) {eps = 1.000000e-05 : f64, normalized_shape = array<i64: 3>, operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4:2 = "ltorch.split"(%3) {dim = 1 : i64, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, split_size_or_sections = 2 : i64} : (tensor<2x3xf32>) -> (tensor<2x2xf32>, tensor<2x1xf32>)
  %5 = "ltorch.sum"(%4#0) {dim = array<i64: 0>, dtype, keepdim = true} : (tensor<2x2xf32>) -> tensor<1x2xf32>
  return %5, %4#1 : tensor<1x2xf32>, tensor<2x1xf32>
}
