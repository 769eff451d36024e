// RUN: not thunder-opt %s --split-input-file 2>&1 | filecheck %s
// RUN: not thunder-opt %s --split-input-file --pass-pipeline='builtin.module(thunder-decompose)' 2>&1 | filecheck %s --check-prefix=PASS
// The verifier runs meta functions on traces with `?` dims too (a `?` taken as one placeholder
// size): a static dim computed from a `?` is rejected, as are dynamic entries without operands.
// Passes that run Python rules on static shapes refuse a dynamic trace instead of computing with `?`.

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

// -----

// PASS: error: thunder-decompose: thunder: this pass takes traces with static shapes; ltorch.gelu has a dynamic size
func.func @decompose(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = "ltorch.gelu"(%x) {approximate = "none"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}
