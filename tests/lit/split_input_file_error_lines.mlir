// RUN: not thunder-opt %s --split-input-file 2>&1 | filecheck %s
// An error in a later chunk of --split-input-file should point at its line in the original file, as mlir-opt does.

func.func @ok(%a: tensor<4xf32>) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}

// -----

// CHECK: split_input_file_error_lines.mlir:[[# @LINE + 2]]:8: error: 'ltorch.neg' op result types
func.func @broken(%a: tensor<4xf32>) -> tensor<3xf32> {
  %0 = "ltorch.neg"(%a) : (tensor<4xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
