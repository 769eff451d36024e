// RUN: thunder-opt %s | filecheck %s
// Reductions carry dim (array<i64>, a single i64, or unit for None), keepdim and dtype attributes.

// CHECK-LABEL: func.func @reductions
// CHECK: "ltorch.sum"(%arg0) {dim = array<i64: 0>, dtype, keepdim = true} : (tensor<2x3xf32>) -> tensor<1x3xf32>
// CHECK: "ltorch.amax"(%arg0) {dim = 1 : i64, keepdim = false} : (tensor<2x3xf32>) -> tensor<2xf32>
// CHECK: "ltorch.mean"(%arg0) {dim, dtype, keepdim = false} : (tensor<2x3xf32>) -> tensor<f32>
// CHECK: "ltorch.sum"(%arg0) {dim = array<i64: -1>, dtype = f64, keepdim = false} : (tensor<2x3xf32>) -> tensor<2xf64>
// CHECK: "ltorch.argmax"(%arg0) {dim = 1 : i64, keepdim = true} : (tensor<2x3xf32>) -> tensor<2x1xi64>
// CHECK: "ltorch.var"(%arg0) {correction, dim = array<i64: 0, 1>, keepdim = false, unbiased = true} : (tensor<2x3xf32>) -> tensor<f32>
func.func @reductions(%x: tensor<2x3xf32>) -> (tensor<1x3xf32>, tensor<2xf32>, tensor<f32>, tensor<2xf64>, tensor<2x1xi64>, tensor<f32>) {
  %0 = "ltorch.sum"(%x) {dim = array<i64: 0>, dtype, keepdim = true} : (tensor<2x3xf32>) -> tensor<1x3xf32>
  %1 = "ltorch.amax"(%x) {dim = 1 : i64, keepdim = false} : (tensor<2x3xf32>) -> tensor<2xf32>
  %2 = "ltorch.mean"(%x) {dim, dtype, keepdim = false} : (tensor<2x3xf32>) -> tensor<f32>
  %3 = "ltorch.sum"(%x) {dim = array<i64: -1>, dtype = f64, keepdim = false} : (tensor<2x3xf32>) -> tensor<2xf64>
  %4 = "ltorch.argmax"(%x) {dim = 1 : i64, keepdim = true} : (tensor<2x3xf32>) -> tensor<2x1xi64>
  %5 = "ltorch.var"(%x) {correction, dim = array<i64: 0, 1>, keepdim = false, unbiased = true} : (tensor<2x3xf32>) -> tensor<f32>
  return %0, %1, %2, %3, %4, %5 : tensor<1x3xf32>, tensor<2xf32>, tensor<f32>, tensor<2xf64>, tensor<2x1xi64>, tensor<f32>
}
