// RUN: thunder-opt %s | filecheck %s
// matmul, linear (optional bias slot), softmax, layer_norm (weight/bias absent) and gelu verify and round-trip.

// CHECK-LABEL: func.func @nn
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>, %[[W:.*]]: tensor<4x3xf32>, %[[B:.*]]: tensor<4xf32>)
// CHECK: %[[L:.*]] = "ltorch.linear"(%[[X]], %[[W]], %[[B]]) {operandSegmentSizes = array<i32: 1, 1, 1>} : (tensor<2x3xf32>, tensor<4x3xf32>, tensor<4xf32>) -> tensor<2x4xf32>
// CHECK: %[[LNB:.*]] = "ltorch.linear"(%[[X]], %[[W]]) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
// CHECK: %[[S:.*]] = "ltorch.softmax"(%[[L]]) {_stacklevel = 3 : i64, dim = -1 : i64, dtype} : (tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK: %[[M:.*]] = "ltorch.matmul"(%[[S]], %[[W]]) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
// CHECK: %[[N:.*]] = "ltorch.layer_norm"(%[[M]]) {eps = 1.000000e-05 : f64, normalized_shape = array<i64: 3>, operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK: %[[G:.*]] = "ltorch.gelu"(%[[N]]) {approximate = "tanh"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK: return %[[G]], %[[LNB]]
func.func @nn(%x: tensor<2x3xf32>, %w: tensor<4x3xf32>, %b: tensor<4xf32>) -> (tensor<2x3xf32>, tensor<2x4xf32>) {
  %0 = "ltorch.linear"(%x, %w, %b) {operandSegmentSizes = array<i32: 1, 1, 1>} : (tensor<2x3xf32>, tensor<4x3xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %1 = "ltorch.linear"(%x, %w) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
  %2 = "ltorch.softmax"(%0) {_stacklevel = 3 : i64, dim = -1 : i64, dtype} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %3 = "ltorch.matmul"(%2, %w) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %4 = "ltorch.layer_norm"(%3) {eps = 1.000000e-05 : f64, normalized_shape = array<i64: 3>, operandSegmentSizes = array<i32: 1, 0, 0, 0>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %5 = "ltorch.gelu"(%4) {approximate = "tanh"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %5, %1 : tensor<2x3xf32>, tensor<2x4xf32>
}
