// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-autograd,thunder-remat)' | filecheck %s
// The chain of remat_elementwise_chain.mlir inside an activation-checkpoint region (its ops'
// locations fused with "checkpoint 1", as torch.utils.checkpoint records them): thunder-remat
// saves none of the region's values, the matmul's result included, so @forward returns only the
// result and the inputs, and @backward recomputes the matmul from them.

// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[X:.*]]: tensor<2x4xf32> {thunder.requires_grad}, %[[W:.*]]: tensor<4x3xf32> {thunder.requires_grad})
// CHECK-SAME: -> (tensor<2x3xf32>, tensor<2x4xf32>, tensor<4x3xf32>)
// CHECK: %[[T:.*]] = "ltorch.tanh"
// CHECK: return %[[T]], %[[X]], %[[W]]

// CHECK-LABEL: func.func @backward
// CHECK-SAME: (%[[SX:.*]]: tensor<2x4xf32>, %[[SW:.*]]: tensor<4x3xf32>, %[[G:.*]]: tensor<2x3xf32>)
// CHECK: %[[MM:.*]] = "ltorch.matmul"(%[[SX]], %[[SW]])
// CHECK: "thunder.sin"(%[[MM]])
// CHECK: return
func.func @computation(%arg0: tensor<2x4xf32> {thunder.requires_grad}, %arg1: tensor<4x3xf32> {thunder.requires_grad}) -> tensor<2x3xf32> {
  %0 = "ltorch.matmul"(%arg0, %arg1) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32> loc(fused<"checkpoint 1">["f.py":1:0])
  %1 = "ltorch.sin"(%0) : (tensor<2x3xf32>) -> tensor<2x3xf32> loc(fused<"checkpoint 1">["f.py":2:0])
  %2 = "ltorch.exp"(%1) : (tensor<2x3xf32>) -> tensor<2x3xf32> loc(fused<"checkpoint 1">["f.py":3:0])
  %3 = "ltorch.tanh"(%2) : (tensor<2x3xf32>) -> tensor<2x3xf32> loc(fused<"checkpoint 1">["f.py":4:0])
  return %3 : tensor<2x3xf32>
}
