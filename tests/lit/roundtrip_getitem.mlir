// RUN: thunder-opt %s | filecheck %s
// getitem's key attribute: ints, slices as dicts of start/stop/step, unit for None, "..." for Ellipsis.

// CHECK-LABEL: func.func @getitem
// CHECK-SAME: (%[[X:.*]]: tensor<4x5xf32>)
// CHECK: "ltorch.getitem"(%[[X]]) {key = [0, {start = 1 : i64, stop = 3 : i64}]} : (tensor<4x5xf32>) -> tensor<2xf32>
// CHECK: "ltorch.getitem"(%[[X]]) {key = ["...", unit, {step = 2 : i64}]} : (tensor<4x5xf32>) -> tensor<4x1x3xf32>
// CHECK: "ltorch.getitem"(%[[X]]) {key = [-1]} : (tensor<4x5xf32>) -> tensor<5xf32>
func.func @getitem(%x: tensor<4x5xf32>) -> (tensor<2xf32>, tensor<4x1x3xf32>, tensor<5xf32>) {
  %0 = "ltorch.getitem"(%x) {key = [0, {start = 1 : i64, stop = 3 : i64}]} : (tensor<4x5xf32>) -> tensor<2xf32>
  %1 = "ltorch.getitem"(%x) {key = ["...", unit, {step = 2 : i64}]} : (tensor<4x5xf32>) -> tensor<4x1x3xf32>
  %2 = "ltorch.getitem"(%x) {key = [-1]} : (tensor<4x5xf32>) -> tensor<5xf32>
  return %0, %1, %2 : tensor<2xf32>, tensor<4x1x3xf32>, tensor<5xf32>
}
