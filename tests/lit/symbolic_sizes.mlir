// RUN: thunder-opt %s | filecheck %s
// RUN: thunder-opt %s --to-python | filecheck %s --check-prefix=PY
// A trace recorded under cache="symbolic values": `?` dims, the symbol read from the input's dim
// (tensor.dim), a size computed from it (arith on index), and an attribute entry given by an
// operand (DYNAMIC in the attribute, the value in the op's dynamic_sizes operands).

// CHECK-LABEL: func.func @computation(%arg0: tensor<?x16xf32>, %arg1: tensor<8x16xf32>) -> tensor<?x2x4xf32>
// CHECK: %[[N:.*]] = tensor.dim %arg0, %c0 : tensor<?x16xf32>
// CHECK: %[[L:.*]] = "ltorch.linear"(%arg0, %arg1) {{.*}} -> tensor<?x8xf32>
// CHECK: %[[M:.*]] = arith.muli %[[N]], %c2 : index
// CHECK: "ltorch.reshape"(%[[L]], %[[M]]) {shape = array<i64: -9223372036854775808, 4>} : (tensor<?x8xf32>, index) -> tensor<?x4xf32>

// PY-LABEL: def computation(x, w):
// PY-NEXT: # x: cpu float32[?, 16]
// PY-NEXT: # w: cpu float32[8, 16]
// PY-NEXT: _sym0 = x.shape[0]
// PY-NEXT: t0 = torch.nn.functional.linear(x, w, None)  # cpu float32[?, 8]
// PY-NEXT: s = _sym0 * 2
// PY-NEXT: t1 = torch.reshape(t0, (s, 4))  # cpu float32[?, 4]
// PY-NEXT: del t0
// PY-NEXT: t2 = torch.reshape(t1, (_sym0, 2, 4))  # cpu float32[?, 2, 4]
// PY-NEXT: del t1
// PY-NEXT: return t2
func.func @computation(%x: tensor<?x16xf32> loc("x"), %w: tensor<8x16xf32> loc("w")) -> tensor<?x2x4xf32> {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %n = tensor.dim %x, %c0 : tensor<?x16xf32> loc("_sym0")
  %0 = "ltorch.linear"(%x, %w) {operandSegmentSizes = array<i32: 1, 1, 0>} : (tensor<?x16xf32>, tensor<8x16xf32>) -> tensor<?x8xf32>
  %m = arith.muli %n, %c2 : index
  %1 = "ltorch.reshape"(%0, %m) {shape = array<i64: -9223372036854775808, 4>} : (tensor<?x8xf32>, index) -> tensor<?x4xf32>
  %2 = "ltorch.reshape"(%1, %n) {shape = array<i64: -9223372036854775808, 2, 4>} : (tensor<?x4xf32>, index) -> tensor<?x2x4xf32>
  return %2 : tensor<?x2x4xf32>
}
