// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-decompose,canonicalize)' --to-python | filecheck %s
// After decomposition --to-python prints the prims' implementations: alpha becomes a mul (in float64,
// rounded once, as torch's fused multiply-add),
// zeros an impl.full with explicit dtype/device, getitem a slice_prim + reshape, transpose a permute.

// CHECK-LABEL: def computation(t0, t1):
// CHECK-NEXT: # t0: cpu float32[2, 3]
// CHECK-NEXT: # t1: cpu float32[2, 3]
// CHECK-NEXT: [[X:d_[0-9_]+]] = impl.convert_element_type(t0, torch.float64)  # cpu float64[2, 3]
// CHECK-NEXT: [[Y:d_[0-9_]+]] = impl.convert_element_type(t1, torch.float64)  # cpu float64[2, 3]
// CHECK-NEXT: [[M:d_[0-9_]+]] = torch.mul([[Y]], 2.0)  # cpu float64[2, 3]
// CHECK-NEXT: del [[Y]]
// CHECK-NEXT: [[D:d_[0-9_]+]] = torch.sub([[X]], [[M]])  # cpu float64[2, 3]
// CHECK-NEXT: del [[X]], [[M]]
// CHECK-NEXT: [[S:d_[0-9_]+]] = impl.convert_element_type([[D]], torch.float32)  # cpu float32[2, 3]
// CHECK-NEXT: del [[D]]
// CHECK-NEXT: [[Z:d_[0-9_]+]] = impl.full((2, 3), 0.0, dtype=torch.bfloat16, device=torch.device('cpu'))  # cpu bfloat16[2, 3]
// CHECK-NEXT: [[SL:d_[0-9_]+]] = impl.slice_prim(t0, (1, 2), (2, 3), (1, 1))  # cpu float32[1, 1]
// CHECK-NEXT: [[G:d_[0-9_]+]] = torch.reshape([[SL]], (1,))  # cpu float32[1]
// CHECK-NEXT: del [[SL]]
// CHECK-NEXT: [[T:d_[0-9_]+]] = torch.permute(t0, (1, 0))  # cpu float32[3, 2]
// CHECK-NEXT: [[A:d_[0-9_]+]] = impl.amax_prim(t0, (1,))  # cpu float32[2]
// CHECK-NEXT: return ([[S]], [[Z]], [[G]], [[T]], [[A]])
// CHECK-NOT: torch.transpose
func.func @computation(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xbf16>, tensor<1xf32>, tensor<3x2xf32>, tensor<2xf32>) {
  %two = arith.constant 2 : i64
  %0 = "ltorch.sub"(%x, %y, %two) : (tensor<2x3xf32>, tensor<2x3xf32>, i64) -> tensor<2x3xf32>
  %1 = "ltorch.zeros"() {device = "cpu", dtype = bf16, requires_grad = false, size = array<i64: 2, 3>} : () -> tensor<2x3xbf16>
  %2 = "ltorch.getitem"(%x) {key = [{start = 1 : i64}, -1]} : (tensor<2x3xf32>) -> tensor<1xf32>
  %3 = "ltorch.transpose"(%x) {dim0 = 0 : i64, dim1 = 1 : i64} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %4 = "ltorch.amax"(%x) {dim = 1 : i64, keepdim = false} : (tensor<2x3xf32>) -> tensor<2xf32>
  return %0, %1, %2, %3, %4 : tensor<2x3xf32>, tensor<2x3xbf16>, tensor<1xf32>, tensor<3x2xf32>, tensor<2xf32>
}
