// RUN: thunder-opt %s --pass-pipeline='builtin.module(cse)' | filecheck %s
// RUN: thunder-opt %s --to-python | filecheck %s --check-prefix=PY
// A list with more runs of types than an op's groups hold is packed (dialects/lists.py): the op
// takes a !thunder.list made by thunder.pack (here the whole list, which is valid at any length),
// and its last result is a !thunder.list that thunder.unpack unpacks. The verifier checks the op
// on the unpacked values; the Python program calls the op on the list and binds every result.

// CHECK-LABEL: func.func @packed
// CHECK: %[[L:.*]] = "thunder.pack"(%arg0, %arg1) {{.*}} : (tensor<2xf32>, tensor<3xf32>) -> !thunder.list
// CHECK: %[[R:.*]]:2 = "ltorch.torch_call"(%[[L]]) {{.*}} : (!thunder.list) -> (tensor<2xf32>, !thunder.list)
// CHECK: %[[U:.*]] = "thunder.unpack"(%[[R]]#1) {{.*}} : (!thunder.list) -> tensor<3xf32>
// CHECK: return %[[R]]#0, %[[U]]

// PY-LABEL: def packed(t0, t1):
// PY: t2, t3 = torch._foreach_exp((t0, t1))
// PY-NEXT: return (t2, t3)
func.func @packed(%a: tensor<2xf32>, %b: tensor<3xf32>) -> (tensor<2xf32>, tensor<3xf32>) {
  %l = "thunder.pack"(%a, %b) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2xf32>, tensor<3xf32>) -> !thunder.list
  %r:2 = "ltorch.torch_call"(%l) {args = "(_0, _1)", autocast, callable = "torch._foreach_exp", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, shapes, strides} : (!thunder.list) -> (tensor<2xf32>, !thunder.list)
  %u = "thunder.unpack"(%r#1) {resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (!thunder.list) -> tensor<3xf32>
  return %r#0, %u : tensor<2xf32>, tensor<3xf32>
}
