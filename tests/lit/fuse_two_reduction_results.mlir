// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-fuse{policy=always})' | filecheck %s
// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-fuse{policy=always})' --to-linalg | filecheck %s --check-prefix=LINALG
// Two sums of the same result type, both results of one region: each gets its own init
// (linalg.fill of a tensor.empty) in the linalg, so they do not share an output buffer. The
// results' first dim is the input's second, so the kernel loops over tiles of columns.

// CHECK-LABEL: func.func private @fusion_0
// CHECK-SAME: -> (tensor<32xf32>, tensor<32xf32>)
// CHECK: "thunder.mul"
// CHECK: "thunder.sum"
// CHECK: "thunder.mul"
// CHECK: "thunder.sum"
// CHECK: return
// CHECK-LABEL: func.func @f
// CHECK: call @fusion_0

// LINALG-LABEL: // fusion_0
// LINALG: func.func @fusion_0(%arg0: memref<4x?xf32, strided<[32, 1]>>, %out0: memref<?xf32>, %out1: memref<?xf32>, %lo: index, %hi: index)
// LINALG: scf.for %i = %lo to %hi step %T {
// LINALG: memref.subview %arg0[0, %i] [4, %n] [1, 1]
// LINALG-COUNT-2: linalg.fill
// LINALG: bufferization.materialize_in_destination {{.*}} in restrict writable %ov0
// LINALG: bufferization.materialize_in_destination {{.*}} in restrict writable %ov1
func.func @f(%arg0: tensor<4x32xf32>) -> (tensor<32xf32>, tensor<32xf32>) {
  %c = arith.constant 2.0 : f64
  %0 = "thunder.mul"(%arg0, %c) : (tensor<4x32xf32>, f64) -> tensor<4x32xf32>
  %1 = "thunder.sum"(%0) {dims = array<i64: 0>} : (tensor<4x32xf32>) -> tensor<32xf32>
  %2 = "thunder.mul"(%0, %0) : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %3 = "thunder.sum"(%2) {dims = array<i64: 0>} : (tensor<4x32xf32>) -> tensor<32xf32>
  return %1, %3 : tensor<32xf32>, tensor<32xf32>
}
