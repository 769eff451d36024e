// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-autograd,thunder-remat,cse,canonicalize)' | filecheck %s
// thunder-autograd and thunder-remat on `?` dims (dialects/symbolic_lift.py): @backward's sizes
// are read from its inputs (the mean's count, the expand of its cotangent to T rows), the
// broadcast's decision (T != 1) is a guard of both funcs, and the saved values keep their
// symbols in thunder.dims.

// CHECK-LABEL: func.func @forward
// CHECK-SAME: %arg0: tensor<?x8xf32> {thunder.dims = ["T", "8"], thunder.requires_grad}
// CHECK-SAME: -> (tensor<8xf32>, tensor<?x8xf32>, tensor<8x8xf32>, tensor<?x8xf32>)
// CHECK-SAME: thunder.size_guards = ["(T != 1)"]
// CHECK: "ltorch.gelu"
// CHECK-LABEL: func.func @backward
// CHECK-SAME: (%arg0: tensor<?x8xf32> {thunder.dims = ["T", "8"]}, %arg1: tensor<8x8xf32>, %arg2: tensor<?x8xf32> {thunder.dims = ["T", "8"]}, %arg3: tensor<8xf32>)
// CHECK: %[[T:.*]] = tensor.dim %arg0, %c0 : tensor<?x8xf32>
// CHECK: "ltorch.expand"(%{{.*}}, %[[T]]) {size = array<i64: -9223372036854775808, 8>}
// CHECK: %[[I:.*]] = arith.index_cast %[[T]] : index to i64
// CHECK: %[[F:.*]] = arith.sitofp %[[I]] : i64 to f64
// CHECK: "ltorch.div"(%{{.*}}, %[[F]])
// CHECK: "ltorch.gelu_backward"
// CHECK: "ltorch.matmul"({{.*}}) : (tensor<8x?xf32>, tensor<?x8xf32>) -> tensor<8x8xf32>
func.func @computation(%x: tensor<?x8xf32> {thunder.dims = ["T", "8"], thunder.requires_grad}, %w: tensor<8x8xf32> {thunder.requires_grad}) -> tensor<8xf32> {
  %0 = "ltorch.matmul"(%x, %w) : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %1 = "ltorch.gelu"(%0) {approximate = "none"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %2 = "ltorch.mean"(%1) {dim = 0 : i64, keepdim = false, dtype} : (tensor<?x8xf32>) -> tensor<8xf32>
  return %2 : tensor<8xf32>
}
