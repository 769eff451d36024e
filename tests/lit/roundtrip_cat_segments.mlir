// RUN: thunder-opt %s | filecheck %s
// cat/stack take a tensor list as 32 variadic groups, each holding tensors of one type;
// operandSegmentSizes says how many each holds (1, 1, 1 here: groups of one are valid too).

// CHECK-LABEL: func.func @cat
// CHECK-SAME: (%[[A:.*]]: tensor<2x3xf32>, %[[B:.*]]: tensor<1x3xf32>, %[[C:.*]]: tensor<2x3xf32>)
// CHECK: %[[R:.*]] = "ltorch.cat"(%[[A]], %[[B]], %[[C]]) {dim = 0 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, {{.*}}>} : (tensor<2x3xf32>, tensor<1x3xf32>, tensor<2x3xf32>) -> tensor<5x3xf32>
// CHECK: %[[S:.*]] = "ltorch.stack"(%[[A]], %[[C]]) {dim = -1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, {{.*}}>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3x2xf32>
// CHECK: return %[[R]], %[[S]]
func.func @cat(%a: tensor<2x3xf32>, %b: tensor<1x3xf32>, %c: tensor<2x3xf32>) -> (tensor<5x3xf32>, tensor<2x3x2xf32>) {
  %0 = "ltorch.cat"(%a, %b, %c) {dim = 0 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<1x3xf32>, tensor<2x3xf32>) -> tensor<5x3xf32>
  %1 = "ltorch.stack"(%a, %c) {dim = -1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3x2xf32>
  return %0, %1 : tensor<5x3xf32>, tensor<2x3x2xf32>
}
