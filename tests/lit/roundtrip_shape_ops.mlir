// RUN: thunder-opt %s | filecheck %s
// Shape ops keep their array<i64: ...> and i64 attributes through parse, verify and print.

// CHECK-LABEL: func.func @shapes
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK: "ltorch.reshape"(%[[X]]) {shape = array<i64: 6, -1>} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
// CHECK: "ltorch.permute"(%[[X]]) {dims = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
// CHECK: "ltorch.transpose"(%[[X]]) {dim0 = 0 : i64, dim1 = -1 : i64} : (tensor<2x3x4xf32>) -> tensor<4x3x2xf32>
// CHECK: "ltorch.unsqueeze"(%[[X]]) {dim = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x1x3x4xf32>
// CHECK: "ltorch.flatten"(%[[X]]) {end_dim = -1 : i64, start_dim = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x12xf32>
// CHECK: "ltorch.expand"(%{{.*}}) {size = array<i64: -1, 5, -1, -1>} : (tensor<2x1x3x4xf32>) -> tensor<2x5x3x4xf32>
func.func @shapes(%x: tensor<2x3x4xf32>) -> (tensor<6x4xf32>, tensor<4x2x3xf32>, tensor<4x3x2xf32>, tensor<2x12xf32>, tensor<2x5x3x4xf32>) {
  %0 = "ltorch.reshape"(%x) {shape = array<i64: 6, -1>} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  %1 = "ltorch.permute"(%x) {dims = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %2 = "ltorch.transpose"(%x) {dim0 = 0 : i64, dim1 = -1 : i64} : (tensor<2x3x4xf32>) -> tensor<4x3x2xf32>
  %3 = "ltorch.unsqueeze"(%x) {dim = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x1x3x4xf32>
  %4 = "ltorch.flatten"(%x) {end_dim = -1 : i64, start_dim = 1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x12xf32>
  %5 = "ltorch.expand"(%3) {size = array<i64: -1, 5, -1, -1>} : (tensor<2x1x3x4xf32>) -> tensor<2x5x3x4xf32>
  return %0, %1, %2, %4, %5 : tensor<6x4xf32>, tensor<4x2x3xf32>, tensor<4x3x2xf32>, tensor<2x12xf32>, tensor<2x5x3x4xf32>
}
