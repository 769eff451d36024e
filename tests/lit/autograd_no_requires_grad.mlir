// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-autograd)' | filecheck %s
// sum(x + b, 0) where only x requires grad (%arg1 has no thunder.requires_grad): @backward
// returns one gradient (grad_of = [0]), the sum's cotangent broadcast back to x's shape, and
// computes nothing for b (no reduction over the broadcast dim); @forward saves nothing.

// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%{{.*}}: tensor<3x4xf32> {thunder.requires_grad}, %{{[^:]*}}: tensor<4xf32>)
// CHECK-SAME: -> tensor<4xf32>
// CHECK: "ltorch.add"
// CHECK: %[[S:.*]] = "ltorch.sum"
// CHECK: return %[[S]] : tensor<4xf32>

// CHECK-LABEL: func.func @backward
// CHECK-SAME: (%[[G:.*]]: tensor<4xf32>) -> tensor<3x4xf32>
// CHECK-SAME: thunder.grad_of = array<i64: 0>
// CHECK: %[[R:.*]] = "ltorch.reshape"(%[[G]]) {shape = array<i64: 1, 4>}
// CHECK: %[[GX:.*]] = "ltorch.expand"(%[[R]]) {size = array<i64: 3, 4>}
// CHECK-NOT: ltorch.sum
// CHECK: return %[[GX]] : tensor<3x4xf32>
func.func @computation(%arg0: tensor<3x4xf32> {thunder.requires_grad}, %arg1: tensor<4xf32>) -> tensor<4xf32> {
  %c1_i64 = arith.constant 1 : i64
  %0 = "ltorch.add"(%arg0, %arg1, %c1_i64) : (tensor<3x4xf32>, tensor<4xf32>, i64) -> tensor<3x4xf32>
  %1 = "ltorch.sum"(%0) {dim = 0 : i64, dtype, keepdim = false} : (tensor<3x4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
