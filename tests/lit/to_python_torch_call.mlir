// RUN: thunder-opt %s --to-python | filecheck %s
// ltorch.torch_call runs as the torch call it names, its result unpacked as torch returns it;
// an operand it writes in place is cloned first (the clone takes the new value's name); under
// autocast it runs in the same autocast region; rng_state reads the generator's state, and
// torch_call_vjp recomputes the call under enable_grad from that state for torch's gradient.

// CHECK-LABEL: def computation(t0):
// CHECK-NEXT: # t0: cpu float32[3, 4]
// CHECK-NEXT: t1 = torch.cumprod(t0, 1)  # cpu float32[3, 4]
// CHECK-NEXT: t2, t3 = torch.sort(t0, 1, descending=True)  # cpu float32[3, 4], cpu int64[3, 4]
// CHECK-NEXT: del t2
// CHECK-NEXT: t4 = t1.clone()
// CHECK-NEXT: torch.Tensor.fill_diagonal_(t4, 2.5)  # cpu float32[3, 4]
// CHECK-NEXT: t5 = torch.t(t0)  # cpu float32[4, 3]
// CHECK-NEXT: with torch.autocast('cpu', dtype=torch.bfloat16):
// CHECK-NEXT:   t6 = torch.mm(t0, t5)  # cpu bfloat16[3, 3]
// CHECK-NEXT: del t5
// CHECK-NEXT: t7 = torch.get_rng_state()  # cpu uint8[5056]
// CHECK-NEXT: t8 = torch.rrelu(t0, 0.125, 0.25, True)  # cpu float32[3, 4]
// CHECK-NEXT: t9, = impl.torch_call_vjp(lambda _0: torch.rrelu(_0, 0.125, 0.25, True), (t0,), (t8,), grads_for=(0,), cotangent_for=(0,), mutated=(), rng_state=t7, autocast=None)  # cpu float32[3, 4]
// CHECK-NEXT: del t8, t7
// CHECK-NEXT: return (t1, t3, t4, t6, t9)
func.func @computation(%x: tensor<3x4xf32>) -> (tensor<3x4xf32>, tensor<3x4xi64>, tensor<3x4xf32>, tensor<3x3xbf16>, tensor<3x4xf32>) {
  %0 = "ltorch.torch_call"(%x) {args = "_0, 1", autocast, callable = "torch.cumprod", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, shapes, strides} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %1:2 = "ltorch.torch_call"(%x) {args = "_0, 1, descending=True", autocast, callable = "torch.sort", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, shapes, strides} : (tensor<3x4xf32>) -> (tensor<3x4xf32>, tensor<3x4xi64>)
  %2 = "ltorch.torch_call"(%0) {args = "_0, 2.5", autocast, callable = "torch.Tensor.fill_diagonal_", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, shapes, strides} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %t = "ltorch.t"(%x) : (tensor<3x4xf32>) -> tensor<4x3xf32>
  %3 = "ltorch.torch_call"(%x, %t) {args = "_0, _1", autocast = "cpu:torch.bfloat16", callable = "torch.mm", operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, shapes, strides} : (tensor<3x4xf32>, tensor<4x3xf32>) -> tensor<3x3xbf16>
  %s = "ltorch.rng_state"() {device = "cpu"} : () -> tensor<5056xui8>
  %4 = "ltorch.torch_call_random"(%x, %s) {args = "_0, 0.125, 0.25, True", autocast, callable = "torch.rrelu", operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, shapes, strides} : (tensor<3x4xf32>, tensor<5056xui8>) -> tensor<3x4xf32>
  %5 = "ltorch.torch_call_vjp"(%x, %4, %s) {args = "_0, 0.125, 0.25, True", autocast, callable = "torch.rrelu", cotangent_for = array<i64: 0>, grads_for = array<i64: 0>, operandSegmentSizes = array<i32: 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, shapes, strides} : (tensor<3x4xf32>, tensor<3x4xf32>, tensor<5056xui8>) -> tensor<3x4xf32>
  return %0, %1#1, %2, %3, %5 : tensor<3x4xf32>, tensor<3x4xi64>, tensor<3x4xf32>, tensor<3x3xbf16>, tensor<3x4xf32>
}
