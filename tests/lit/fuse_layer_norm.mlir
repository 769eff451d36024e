// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-decompose,cse,canonicalize,thunder-fuse{policy=always})' | filecheck %s
// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-decompose,cse,canonicalize,thunder-fuse{policy=always})' --to-python | filecheck %s --check-prefix=PY
// residual + layer_norm becomes one region (two reductions, the broadcasts of weight and bias);
// its numbers (1/n, eps) are constants inside the region. The matmul stays a torch call.

// CHECK-LABEL: func.func private @fusion_0
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>, %[[R:.*]]: tensor<2x3xf32>, %[[W:.*]]: tensor<3xf32>, %[[B:.*]]: tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-SAME: attributes {thunder.executor = "linalg"}
// CHECK-DAG: arith.constant 3.000000e+00 : f64
// CHECK-DAG: arith.constant 1.000000e-05 : f64
// CHECK: "thunder.add"(%[[X]], %[[R]])
// CHECK: "thunder.sum"
// CHECK: "thunder.sum"
// CHECK: "thunder.rsqrt"
// CHECK: "thunder.broadcast_in_dim"(%[[W]])
// CHECK: "thunder.broadcast_in_dim"(%[[B]])
// CHECK: return
// CHECK-NOT: thunder.matmul

// CHECK-LABEL: func.func @residual_ln
// CHECK-NOT: arith.constant
// CHECK: %[[N:.*]] = call @fusion_0(%arg0, %arg1, %arg2, %arg3)
// CHECK-NEXT: %[[MM:.*]] = "thunder.matmul"(%[[N]], %arg4)
// CHECK-NEXT: return %[[MM]]

// PY-LABEL: def residual_ln(
// PY: = fusion_0(t0, t1, t2, t3)  # cpu float32[2, 3] (linalg: 16 ops)
// PY-NEXT: = torch.matmul(
func.func @residual_ln(%x: tensor<2x3xf32>, %r: tensor<2x3xf32>, %w: tensor<3xf32>, %b: tensor<3xf32>, %m: tensor<3x3xf32>) -> tensor<2x3xf32> {
  %0 = "thunder.add"(%x, %r) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = "ltorch.layer_norm"(%0, %w, %b) {eps = 1.000000e-05 : f64, normalized_shape = array<i64: 3>, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %2 = "ltorch.matmul"(%1, %m) : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
  return %2 : tensor<2x3xf32>
}
