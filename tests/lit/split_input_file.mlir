// RUN: not thunder-opt %s --split-input-file --pass-pipeline='builtin.module(thunder-decompose)' 2>/dev/null | filecheck %s
// RUN: not thunder-opt %s --split-input-file --pass-pipeline='builtin.module(thunder-decompose)' 2>&1 >/dev/null | filecheck %s --check-prefix=ERR
// --split-input-file runs each chunk between separator lines as its own module: the outputs are
// separated too, and an invalid chunk is reported without stopping the chunks after it.

// CHECK-LABEL: func.func @first
// CHECK: "thunder.exp"
// CHECK-NOT: func.func @broken
// CHECK: // {{-----}}
func.func @first(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "ltorch.exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// CHECK-NOT: func.func
// CHECK: // {{-----}}
// ERR: error: 'ltorch.neg' op result types (tensor<3xf32>) do not match the inferred types (tensor<4xf32>)
// ERR-NOT: error
func.func @broken(%a: tensor<4xf32>) -> tensor<3xf32> {
  %0 = "ltorch.neg"(%a) : (tensor<4xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// CHECK-LABEL: func.func @third
// CHECK: %[[T:.*]] = "thunder.transpose"(%arg0) {permutation = array<i64: 1, 0>}
// CHECK: return %[[T]]
func.func @third(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %0 = "ltorch.t"(%a) : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}
