// RUN: thunder-opt %s --pass-pipeline='builtin.module(cse)' | filecheck %s
// ltorch ops are Pure: CSE merges two identical adds.

// CHECK-LABEL: func.func @computation
// CHECK-COUNT-1: "ltorch.add"
// CHECK-NOT: "ltorch.add"(%arg0, %arg1
// CHECK: return
func.func @computation(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %one = arith.constant 1 : i64
  %0 = "ltorch.add"(%a, %b, %one) : (tensor<4xf32>, tensor<4xf32>, i64) -> tensor<4xf32>
  %1 = "ltorch.add"(%a, %b, %one) : (tensor<4xf32>, tensor<4xf32>, i64) -> tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}
