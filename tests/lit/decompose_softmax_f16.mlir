// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-decompose)' | filecheck %s
// softmax of an f16 tensor decomposes into prims computed in f32 (amax, sub, exp, sum, the
// reciprocal of each row's sum times each exp, as torch's kernel) and converted back to f16.

// CHECK-LABEL: func.func @softmax
// CHECK-SAME: (%[[X:.*]]: tensor<2x4xf16>)
// CHECK: %[[UP:.*]] = "thunder.convert_element_type"(%[[X]]) {dtype = f32} : (tensor<2x4xf16>) -> tensor<2x4xf32>
// CHECK: %[[MAX:.*]] = "thunder.amax"(%[[UP]]) {dims = array<i64: 1>} : (tensor<2x4xf32>) -> tensor<2xf32>
// CHECK: %[[MAXB:.*]] = "thunder.broadcast_in_dim"(%[[MAX]]) {broadcast_dims = array<i64: 0>, shape = array<i64: 2, 4>}
// CHECK: %[[SH:.*]] = "thunder.sub"(%[[UP]], %[[MAXB]])
// CHECK: %[[E:.*]] = "thunder.exp"(%[[SH]])
// CHECK: %[[SUM:.*]] = "thunder.sum"(%[[E]]) {dims = array<i64: 1>} : (tensor<2x4xf32>) -> tensor<2xf32>
// CHECK: %[[R:.*]] = "thunder.reciprocal"(%[[SUM]]) : (tensor<2xf32>) -> tensor<2xf32>
// CHECK: %[[RB:.*]] = "thunder.broadcast_in_dim"(%[[R]])
// CHECK: %[[D:.*]] = "thunder.mul"(%[[E]], %[[RB]]) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK: %[[DOWN:.*]] = "thunder.convert_element_type"(%[[D]]) {dtype = f16} : (tensor<2x4xf32>) -> tensor<2x4xf16>
// CHECK-NOT: ltorch.softmax
// CHECK: return %[[DOWN]]
func.func @softmax(%x: tensor<2x4xf16>) -> tensor<2x4xf16> {
  %0 = "ltorch.softmax"(%x) {_stacklevel = 3 : i64, dim = 1 : i64, dtype} : (tensor<2x4xf16>) -> tensor<2x4xf16>
  return %0 : tensor<2x4xf16>
}
