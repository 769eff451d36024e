// RUN: not thunder-opt %s --split-input-file 2>&1 | filecheck %s
// The verifier runs meta functions on traces with `?` dims too (a `?` taken as one placeholder
// size): a static dim computed from a `?` is rejected, as are dynamic entries without operands.

// CHECK: error: 'ltorch.reshape' op result types (tensor<8x4xf32>) do not match the inferred types (tensor<?x4xf32>)
func.func @static_from_dynamic(%x: tensor<?x8xf32>) -> tensor<8x4xf32> {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %n = tensor.dim %x, %c0 : tensor<?x8xf32>
  %m = arith.muli %n, %c2 : index
  %0 = "ltorch.reshape"(%x, %m) {shape = array<i64: -9223372036854775808, 4>} : (tensor<?x8xf32>, index) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// CHECK: error: 'ltorch.reshape' op invalid operands: fewer 'dynamic_sizes' operands than dynamic attribute entries
func.func @missing_operand(%x: tensor<?x8xf32>) -> tensor<?x4xf32> {
  %0 = "ltorch.reshape"(%x) {shape = array<i64: -9223372036854775808, 4>} : (tensor<?x8xf32>) -> tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}
