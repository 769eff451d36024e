// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-fuse{policy=always})' | filecheck %s
// thunder-fuse on `?` dims: a region of ops on dynamic sizes becomes a func with `?` dims whose
// arguments carry thunder.dims (which `?` dims are one symbol: its kernel reads the symbols from
// them); what its decomposition computes from sizes (the mean's count) reads its arguments'
// dims; the decisions the decomposition takes on the symbols (the add's broadcast: T != 1) are
// the caller's size guards. The exp after the matmul, on static shapes, is a region as before.

// CHECK-LABEL: func.func private @fusion_0
// CHECK-SAME: (%arg0: tensor<?x8xf32> {thunder.dims = ["T", "8"]}, %arg1: tensor<?x8xf32> {thunder.dims = ["T", "8"]}) -> tensor<8xf32>
// CHECK-SAME: attributes {thunder.executor = "linalg"}
// CHECK: %[[T:.*]] = tensor.dim %arg0, %{{.*}} : tensor<?x8xf32>
// CHECK: "thunder.erf"
// CHECK: %[[SUM:.*]] = "thunder.sum"
// CHECK: %[[I:.*]] = arith.index_cast %[[T]] : index to i64
// CHECK: %[[F:.*]] = arith.sitofp %[[I]] : i64 to f64
// CHECK: "thunder.div"(%[[SUM]], %[[F]])
// CHECK-LABEL: func.func private @fusion_1
// CHECK-SAME: (%arg0: tensor<8xf32>, %arg1: tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK: "thunder.exp"
// CHECK-LABEL: func.func @named
// CHECK-SAME: attributes {thunder.size_guards = ["(T != 1)"]}
// CHECK: %[[M:.*]] = call @fusion_0(%arg0, %arg1) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<8xf32>
// CHECK: %[[MM:.*]] = "ltorch.matmul"(%[[M]], %arg2)
// CHECK: call @fusion_1(%[[MM]], %arg2)
func.func @named(%x: tensor<?x8xf32> {thunder.dims = ["T", "8"]}, %y: tensor<?x8xf32> {thunder.dims = ["T", "8"]}, %w: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = "ltorch.gelu"(%x) {approximate = "none"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %c1 = arith.constant 1 : i64
  %1 = "ltorch.add"(%0, %y, %c1) : (tensor<?x8xf32>, tensor<?x8xf32>, i64) -> tensor<?x8xf32>
  %2 = "ltorch.mean"(%1) {dim = 0 : i64, keepdim = false, dtype} : (tensor<?x8xf32>) -> tensor<8xf32>
  %3 = "ltorch.matmul"(%2, %w) : (tensor<8xf32>, tensor<8x8xf32>) -> tensor<8xf32>
  %4 = "ltorch.exp"(%3) : (tensor<8xf32>) -> tensor<8xf32>
  %5 = "ltorch.unsqueeze"(%4) {dim = 0 : i64} : (tensor<8xf32>) -> tensor<1x8xf32>
  %6 = "ltorch.mul"(%5, %w) : (tensor<1x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %6 : tensor<8x8xf32>
}
