// RUN: thunder-opt %s --pass-pipeline='builtin.module(cse)' | filecheck %s
// ltorch.torch_call, the fallback's generic op: the torch callable by name, its non-tensor
// arguments as source (`_i`: tensor operand i), its results typed by torch's own meta kernels
// (the verifier runs them). Pure: cse merges the two cumprods. torch_call_random is not: both
// rrelu draws stay. Operands are grouped by type into runs (block_diag: 2 f32 2x2, then 1x3).

// CHECK-LABEL: func.func @calls
// CHECK-SAME: (%[[X:.*]]: tensor<3x4xf32>, %[[A:.*]]: tensor<2x2xf32>, %[[B:.*]]: tensor<1x3xf32>)
// CHECK: %[[C:.*]] = "ltorch.torch_call"(%[[X]]) {args = "_0, 1", autocast, callable = "torch.cumprod", operandSegmentSizes = array<i32: 1, 0, {{.*}}>, resultSegmentSizes = array<i32: 1, 0, {{.*}}>, shapes, strides} : (tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK-NOT: "torch.cumprod"
// CHECK: %[[S:.*]]:2 = "ltorch.torch_call"(%[[X]]) {args = "_0, 1, descending=True", autocast, callable = "torch.sort", {{.*}}resultSegmentSizes = array<i32: 1, 1, 0, {{.*}}>, shapes, strides} : (tensor<3x4xf32>) -> (tensor<3x4xf32>, tensor<3x4xi64>)
// CHECK: %[[D:.*]] = "ltorch.torch_call"(%[[A]], %[[A]], %[[B]]) {args = "_0, _2, _1", autocast, callable = "torch.block_diag", operandSegmentSizes = array<i32: 2, 1, 0, {{.*}}>, {{.*}}} : (tensor<2x2xf32>, tensor<2x2xf32>, tensor<1x3xf32>) -> tensor<5x7xf32>
// CHECK: %[[ST:.*]] = "ltorch.rng_state"() {device = "cpu"} : () -> tensor<5056xui8>
// CHECK: %[[R1:.*]] = "ltorch.torch_call_random"(%[[X]], %[[ST]]) {args = "_0, 0.125, 0.3333333333333333, True", autocast, callable = "torch.rrelu", {{.*}}} : (tensor<3x4xf32>, tensor<5056xui8>) -> tensor<3x4xf32>
// CHECK: %[[R2:.*]] = "ltorch.torch_call_random"(%[[X]], %[[ST]])
// CHECK: return %[[C]], %[[C]], %[[S]]#1, %[[D]], %[[R1]], %[[R2]]
func.func @calls(%x: tensor<3x4xf32>, %a: tensor<2x2xf32>, %b: tensor<1x3xf32>) -> (tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xi64>, tensor<5x7xf32>, tensor<3x4xf32>, tensor<3x4xf32>) {
  %0 = "ltorch.torch_call"(%x) {args = "_0, 1", autocast, callable = "torch.cumprod", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, shapes, strides} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %1 = "ltorch.torch_call"(%x) {args = "_0, 1", autocast, callable = "torch.cumprod", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, shapes, strides} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %2:2 = "ltorch.torch_call"(%x) {args = "_0, 1, descending=True", autocast, callable = "torch.sort", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, shapes, strides} : (tensor<3x4xf32>) -> (tensor<3x4xf32>, tensor<3x4xi64>)
  %3 = "ltorch.torch_call"(%a, %a, %b) {args = "_0, _2, _1", autocast, callable = "torch.block_diag", operandSegmentSizes = array<i32: 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, shapes, strides} : (tensor<2x2xf32>, tensor<2x2xf32>, tensor<1x3xf32>) -> tensor<5x7xf32>
  %s = "ltorch.rng_state"() {device = "cpu"} : () -> tensor<5056xui8>
  %4 = "ltorch.torch_call_random"(%x, %s) {args = "_0, 0.125, 0.3333333333333333, True", autocast, callable = "torch.rrelu", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, shapes, strides} : (tensor<3x4xf32>, tensor<5056xui8>) -> tensor<3x4xf32>
  %5 = "ltorch.torch_call_random"(%x, %s) {args = "_0, 0.125, 0.3333333333333333, True", autocast, callable = "torch.rrelu", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, shapes, strides} : (tensor<3x4xf32>, tensor<5056xui8>) -> tensor<3x4xf32>
  return %0, %1, %2#1, %3, %4, %5 : tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xi64>, tensor<5x7xf32>, tensor<3x4xf32>, tensor<3x4xf32>
}
