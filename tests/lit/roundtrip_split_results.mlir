// RUN: thunder-opt %s | filecheck %s
// Ops returning several tensors (split, chunk) use 16 variadic result groups (one type each) and
// resultSegmentSizes.

// CHECK-LABEL: func.func @split
// CHECK-SAME: (%[[X:.*]]: tensor<5x3xf32>)
// CHECK: %[[S:.*]]:3 = "ltorch.split"(%[[X]]) {dim = 0 : i64, resultSegmentSizes = array<i32: 1, 1, 1, 0, {{.*}}>, split_size_or_sections = 2 : i64} : (tensor<5x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<1x3xf32>)
// CHECK: %[[T:.*]]:2 = "ltorch.split"(%[[X]]) {dim = 1 : i64, resultSegmentSizes = array<i32: 1, 1, 0, {{.*}}>, split_size_or_sections = array<i64: 1, 2>} : (tensor<5x3xf32>) -> (tensor<5x1xf32>, tensor<5x2xf32>)
// CHECK: %[[C:.*]]:2 = "ltorch.chunk"(%[[X]]) {chunks = 2 : i64, dim = 0 : i64, resultSegmentSizes = array<i32: 1, 1, 0, {{.*}}>} : (tensor<5x3xf32>) -> (tensor<3x3xf32>, tensor<2x3xf32>)
// CHECK: return %[[S]]#0, %[[S]]#2, %[[T]]#1, %[[C]]#1
func.func @split(%x: tensor<5x3xf32>) -> (tensor<2x3xf32>, tensor<1x3xf32>, tensor<5x2xf32>, tensor<2x3xf32>) {
  %0:3 = "ltorch.split"(%x) {dim = 0 : i64, resultSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, split_size_or_sections = 2 : i64} : (tensor<5x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<1x3xf32>)
  %1:2 = "ltorch.split"(%x) {dim = 1 : i64, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, split_size_or_sections = array<i64: 1, 2>} : (tensor<5x3xf32>) -> (tensor<5x1xf32>, tensor<5x2xf32>)
  %2:2 = "ltorch.chunk"(%x) {chunks = 2 : i64, dim = 0 : i64, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<5x3xf32>) -> (tensor<3x3xf32>, tensor<2x3xf32>)
  return %0#0, %0#2, %1#1, %2#1 : tensor<2x3xf32>, tensor<1x3xf32>, tensor<5x2xf32>, tensor<2x3xf32>
}
