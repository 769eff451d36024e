// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-decompose)' | filecheck %s
// layer_norm with weight and bias: mean, centered variance, rsqrt(var + eps), then the affine
// transform with broadcast weight and bias.

// CHECK-LABEL: func.func @ln
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>, %[[W:.*]]: tensor<3xf32>, %[[B:.*]]: tensor<3xf32>)
// CHECK: %[[S:.*]] = "thunder.sum"(%[[X]]) {dims = array<i64: 1>}
// CHECK: %[[MEAN:.*]] = "thunder.div"(%[[S]], %{{.*}}) : (tensor<2xf32>, f64) -> tensor<2xf32>
// CHECK: %[[MB:.*]] = "thunder.broadcast_in_dim"(%[[MEAN]])
// CHECK: %[[C:.*]] = "thunder.sub"(%[[X]], %[[MB]])
// CHECK: %[[SQ:.*]] = "thunder.mul"(%[[C]], %[[C]])
// CHECK: "thunder.sum"(%[[SQ]]) {dims = array<i64: 1>}
// CHECK: %[[EPS:.*]] = arith.constant 1.000000e-05 : f64
// CHECK: %[[VE:.*]] = "thunder.add"(%{{.*}}, %[[EPS]]) : (tensor<2xf32>, f64) -> tensor<2xf32>
// CHECK: %[[R:.*]] = "thunder.rsqrt"(%[[VE]])
// CHECK: %[[RB:.*]] = "thunder.broadcast_in_dim"(%[[R]])
// CHECK: %[[N:.*]] = "thunder.mul"(%[[C]], %[[RB]])
// CHECK: %[[WB:.*]] = "thunder.broadcast_in_dim"(%[[W]]) {broadcast_dims = array<i64: 1>, shape = array<i64: 2, 3>}
// CHECK: %[[NW:.*]] = "thunder.mul"(%[[N]], %[[WB]])
// CHECK: %[[BB:.*]] = "thunder.broadcast_in_dim"(%[[B]]) {broadcast_dims = array<i64: 1>, shape = array<i64: 2, 3>}
// CHECK: %[[OUT:.*]] = "thunder.add"(%[[NW]], %[[BB]]) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NOT: ltorch.layer_norm
// CHECK: return %[[OUT]]
func.func @ln(%x: tensor<2x3xf32>, %w: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  %0 = "ltorch.layer_norm"(%x, %w, %b) {eps = 1.000000e-05 : f64, normalized_shape = array<i64: 3>, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
