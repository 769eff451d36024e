// RUN: not thunder-opt %s --pass-pipeline='builtin.module(thunder-decompse)' 2>&1 | filecheck %s
// RUN: not thunder-opt %s --pass-pipeline='builtin.module(cse' 2>&1 | filecheck %s --check-prefix=PAREN
// A misspelled pass name or a malformed pipeline is reported and thunder-opt fails.

// CHECK: error: 'thunder-decompse' does not refer to a registered pass or pass pipeline
// PAREN: error: encountered unbalanced parentheses while parsing pipeline
func.func @computation(%a: tensor<4xf32>) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}
