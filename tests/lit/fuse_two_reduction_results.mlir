// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-fuse)' | filecheck %s
// Two sums of the same result type that are both results of one region would share one
// linalg.fill, which the linalg lowering miscompiles (the second overwrites the first's output):
// the second sum, used by nothing in the region, becomes a region of its own.

// CHECK-LABEL: func.func private @fusion_0
// CHECK-SAME: -> tensor<32xf32>
// CHECK-NEXT: arith.constant
// CHECK-NEXT: "thunder.mul"
// CHECK-NEXT: "thunder.sum"
// CHECK-NEXT: return
// CHECK-LABEL: func.func private @fusion_1
// CHECK-NEXT: "thunder.sum"
// CHECK-NEXT: return
// CHECK-LABEL: func.func @f
// CHECK: call @fusion_0
// CHECK: call @fusion_1
func.func @f(%arg0: tensor<4x32xf32>) -> (tensor<32xf32>, tensor<32xf32>) {
  %c = arith.constant 2.0 : f64
  %0 = "thunder.mul"(%arg0, %c) : (tensor<4x32xf32>, f64) -> tensor<4x32xf32>
  %1 = "thunder.sum"(%0) {dims = array<i64: 0>} : (tensor<4x32xf32>) -> tensor<32xf32>
  %2 = "thunder.sum"(%arg0) {dims = array<i64: 0>} : (tensor<4x32xf32>) -> tensor<32xf32>
  return %1, %2 : tensor<32xf32>, tensor<32xf32>
}
