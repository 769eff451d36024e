// RUN: not thunder-opt %s --split-input-file 2>&1 | filecheck %s
// Segment sizes must agree with the operands, and a multi-result op must have exactly the results
// its meta function produces (split of 5 rows by 2 gives three pieces, not two).

// CHECK: error: sum of elements in 'operandSegmentSizes' attribute must be equal to the number of operands
func.func @cat_segments(%a: tensor<2x3xf32>, %b: tensor<1x3xf32>) -> tensor<3x3xf32> {
  %0 = "ltorch.cat"(%a, %b) {dim = 0 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// -----

// CHECK: error: 'ltorch.split' op result types (tensor<2x3xf32>, tensor<2x3xf32>) do not match the inferred types (tensor<2x3xf32>, tensor<2x3xf32>, tensor<1x3xf32>)
func.func @split_results(%x: tensor<5x3xf32>) -> tensor<2x3xf32> {
  %0:2 = "ltorch.split"(%x) {dim = 0 : i64, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, split_size_or_sections = 2 : i64} : (tensor<5x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>)
  return %0#0 : tensor<2x3xf32>
}
