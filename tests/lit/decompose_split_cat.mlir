// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-decompose)' | filecheck %s
// split (several results) becomes one thunder.slice per piece; cat of f32 and f16 promotes the f16
// input and becomes thunder.cat; its two inputs now have one type, so they form one run (segment
// sizes count runs of equal types: 2, then empty groups).

// CHECK-LABEL: func.func @splitcat
// CHECK-SAME: (%[[X:.*]]: tensor<5x3xf32>, %[[Y:.*]]: tensor<5x3xf16>)
// CHECK: %[[P0:.*]] = "thunder.slice"(%[[X]]) {end_indices = array<i64: 5, 1>, start_indices = array<i64: 0, 0>, strides = array<i64: 1, 1>} : (tensor<5x3xf32>) -> tensor<5x1xf32>
// CHECK: %[[P1:.*]] = "thunder.slice"(%[[X]]) {end_indices = array<i64: 5, 3>, start_indices = array<i64: 0, 1>, strides = array<i64: 1, 1>} : (tensor<5x3xf32>) -> tensor<5x2xf32>
// CHECK: %[[Y32:.*]] = "thunder.convert_element_type"(%[[Y]]) {dtype = f32} : (tensor<5x3xf16>) -> tensor<5x3xf32>
// CHECK: %[[C:.*]] = "thunder.cat"(%[[X]], %[[Y32]]) {dim = 0 : i64, operandSegmentSizes = array<i32: 2, 0, {{.*}}>} : (tensor<5x3xf32>, tensor<5x3xf32>) -> tensor<10x3xf32>
// CHECK-NOT: ltorch.
// CHECK: return %[[P0]], %[[P1]], %[[C]]
func.func @splitcat(%x: tensor<5x3xf32>, %y: tensor<5x3xf16>) -> (tensor<5x1xf32>, tensor<5x2xf32>, tensor<10x3xf32>) {
  %0:2 = "ltorch.split"(%x) {dim = 1 : i64, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, split_size_or_sections = array<i64: 1, 2>} : (tensor<5x3xf32>) -> (tensor<5x1xf32>, tensor<5x2xf32>)
  %1 = "ltorch.cat"(%x, %y) {dim = 0 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<5x3xf32>, tensor<5x3xf16>) -> tensor<10x3xf32>
  return %0#0, %0#1, %1 : tensor<5x1xf32>, tensor<5x2xf32>, tensor<10x3xf32>
}
