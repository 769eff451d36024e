// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-fuse{policy=always})' | filecheck %s
// tanh(-exp(x) + exp(x) @ w): matmul has no linalg lowering, so it stays in the caller.
// {exp, neg, add, tanh} would be a region that needs the matmul's result while the matmul needs
// the region's exp: add and tanh form a second region after the matmul instead.

// CHECK-LABEL: func.func private @fusion_0
// CHECK-SAME: (%[[X:.*]]: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
// CHECK-SAME: attributes {thunder.executor = "linalg"}
// CHECK-NEXT: %[[E:.*]] = "thunder.exp"(%[[X]])
// CHECK-NEXT: %[[S:.*]] = "thunder.neg"(%[[E]])
// CHECK-NEXT: return %[[E]], %[[S]]

// CHECK-LABEL: func.func private @fusion_1
// CHECK-SAME: attributes {thunder.executor = "linalg"}
// CHECK-NEXT: "thunder.add"
// CHECK-NEXT: "thunder.tanh"
// CHECK-NEXT: return

// CHECK-LABEL: func.func @f
// CHECK-SAME: (%[[A:.*]]: tensor<4x4xf32>, %[[W:.*]]: tensor<4x4xf32>)
// CHECK-NEXT: %[[R:.*]]:2 = call @fusion_0(%[[A]])
// CHECK-NEXT: %[[MM:.*]] = "thunder.matmul"(%[[R]]#0, %[[W]])
// CHECK-NEXT: %[[OUT:.*]] = call @fusion_1(%[[R]]#1, %[[MM]])
// CHECK-NEXT: return %[[OUT]]
func.func @f(%arg0: tensor<4x4xf32>, %arg1: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = "thunder.exp"(%arg0) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = "thunder.matmul"(%0, %arg1) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = "thunder.neg"(%0) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %3 = "thunder.add"(%2, %1) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %4 = "thunder.tanh"(%3) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  return %4 : tensor<4x4xf32>
}
