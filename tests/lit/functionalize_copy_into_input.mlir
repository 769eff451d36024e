// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-functionalize)' | filecheck %s
// An in-place update of an input (buf.add_(x); buf.mul_(2)) is a copy_ into the argument in the
// acquired trace; thunder-functionalize makes the final value a result named in thunder.mutated_inputs.

// CHECK-LABEL: func.func @computation
// CHECK-SAME: -> (tensor<2xf32>, tensor<2xf32>) attributes {thunder.mutated_inputs = array<i64: 1>}
// CHECK: %[[NEW:.*]] = "ltorch.add"(%arg1, %arg0
// CHECK: %[[OUT:.*]] = "ltorch.mul"(%arg0
// CHECK-NOT: ltorch.copy_
// CHECK: return %[[OUT]], %[[NEW]] : tensor<2xf32>, tensor<2xf32>
func.func @computation(%x: tensor<2xf32>, %buf: tensor<2xf32>) -> tensor<2xf32> {
  %one = arith.constant 1 : i64
  %0 = "ltorch.add"(%buf, %x, %one) : (tensor<2xf32>, tensor<2xf32>, i64) -> tensor<2xf32>
  %two = arith.constant 2 : i64
  %1 = "ltorch.mul"(%x, %two) : (tensor<2xf32>, i64) -> tensor<2xf32>
  %2 = "ltorch.copy_"(%buf, %0) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %1 : tensor<2xf32>
}
