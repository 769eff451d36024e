// RUN: thunder-opt %s --to-python | filecheck %s
// Runtime numbers (values read from tensors, core/numbers.py) are SSA values of type f64/i64/i1:
// ltorch.item reads one, ltorch.number_op computes with them as Python does, ops take them as
// number operands, and ltorch.check compares a value the trace was specialized on with this
// call's (a difference raises impl.ValueChanged, a cache miss; the random state at the start is
// restored when a random op ran before it). A data-dependent shape is checked the same way.

// CHECK-LABEL: def computation(t0, t1):
// CHECK-NEXT: # t0: cpu float32[3]
// CHECK-NEXT: # t1: cpu bool[3]
// CHECK-NEXT: _rng = impl.rng_snapshot()
// CHECK-NEXT: t2 = torch.rand((3,))  # cpu float32[3]
// CHECK-NEXT: t3 = torch.sum(t0, None, False)  # cpu float32[]
// CHECK-NEXT: t4 = torch.Tensor.item(t3)  # float
// CHECK-NEXT: del t3
// CHECK-NEXT: t5 = t4 > 1.0  # bool
// CHECK-NEXT: if t5 is not True: impl.value_changed(t5, True, 'bool() of t3.item() > 1.0 at f.py:3', _rng)
// CHECK-NEXT: t6 = t4 * 2  # float
// CHECK-NEXT: t7 = torch.mul(t2, t6)  # cpu float32[3]
// CHECK-NEXT: del t2
// CHECK-NEXT: t8 = torch.masked_select(t0, t1)  # cpu float32[2]
// CHECK-NEXT: if t8.shape != (2,): impl.value_changed(tuple(t8.shape), (2,), 'the result shape of torch.masked_select() at f.py:4', _rng)
// CHECK-NEXT: return (t7, t8, t6)
func.func @computation(%x: tensor<3xf32>, %m: tensor<3xi1>) -> (tensor<3xf32>, tensor<2xf32>, f64) {
  %r = "ltorch.rand"() {size = array<i64: 3>, dtype, device, requires_grad = false} : () -> tensor<3xf32>
  %s = "ltorch.sum"(%x) {dim, dtype, keepdim = false} : (tensor<3xf32>) -> tensor<f32>
  %n0 = "ltorch.item"(%s) : (tensor<f32>) -> f64
  %one = arith.constant 1.0 : f64
  %n1 = "ltorch.number_op"(%n0, %one) {fn = "gt", operandSegmentSizes = array<i32: 1, 1>} : (f64, f64) -> i1
  "ltorch.check"(%n1) {expected = "True", resultSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, what = "bool() of t3.item() > 1.0 at f.py:3"} : (i1) -> ()
  %two = arith.constant 2 : i64
  %n2 = "ltorch.number_op"(%n0, %two) {fn = "mul", operandSegmentSizes = array<i32: 1, 1>} : (f64, i64) -> f64
  %y = "ltorch.mul"(%r, %n2) : (tensor<3xf32>, f64) -> tensor<3xf32>
  %sel = "ltorch.torch_call"(%x, %m) {args = "_0, _1", autocast, callable = "torch.masked_select", shapes = "((2,),)", strides, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<3xf32>, tensor<3xi1>) -> tensor<2xf32>
  "ltorch.check"(%sel) {expected = "(2,)", resultSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, what = "the result shape of torch.masked_select() at f.py:4"} : (tensor<2xf32>) -> ()
  return %y, %sel, %n2 : tensor<3xf32>, tensor<2xf32>, f64
}
