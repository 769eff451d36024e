// RUN: thunder-opt %s --split-input-file | filecheck %s
// The separator only counts on a line of its own (as in mlir-opt): this comment mentions it inline, "// -----", and must not split.

// CHECK-LABEL: func.func @only
func.func @only(%a: tensor<4xf32>) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}
