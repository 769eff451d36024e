// RUN: thunder-opt %s --split-input-file --pass-pipeline='builtin.module(thunder-decompose,cse,canonicalize)' | filecheck %s
// thunder-decompose on `?` dims: the rules compute sizes from symbols (dialects/symbolic_lift.py).
// `thunder.dims` says which `?` dims are one symbol; a decision the rules take on them (the
// broadcast's T != 1) is a guard of the func; the mean's count is the size read at run time.

// CHECK-LABEL: func.func @named
// CHECK-SAME: {thunder.dims = ["T", "8"]}
// CHECK-SAME: attributes {thunder.size_guards = ["(T != 1)"]}
// CHECK: %[[T:.*]] = tensor.dim %arg0, %c0 : tensor<?x8xf32>
// CHECK: "thunder.erf"
// CHECK: %[[S:.*]] = "thunder.add"(%{{.*}}, %arg1) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
// CHECK: %[[SUM:.*]] = "thunder.sum"(%[[S]]) {dims = array<i64: 0>} : (tensor<?x8xf32>) -> tensor<8xf32>
// CHECK: %[[I:.*]] = arith.index_cast %[[T]] : index to i64
// CHECK: %[[F:.*]] = arith.sitofp %[[I]] : i64 to f64
// CHECK: "thunder.div"(%[[SUM]], %[[F]]) : (tensor<8xf32>, f64) -> tensor<8xf32>
func.func @named(%x: tensor<?x8xf32> {thunder.dims = ["T", "8"]}, %y: tensor<?x8xf32> {thunder.dims = ["T", "8"]}) -> tensor<8xf32> {
  %0 = "ltorch.gelu"(%x) {approximate = "none"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %c1 = arith.constant 1 : i64
  %1 = "ltorch.add"(%0, %y, %c1) : (tensor<?x8xf32>, tensor<?x8xf32>, i64) -> tensor<?x8xf32>
  %2 = "ltorch.mean"(%1) {dim = 0 : i64, keepdim = false, dtype} : (tensor<?x8xf32>) -> tensor<8xf32>
  return %2 : tensor<8xf32>
}

// -----

// Without thunder.dims each `?` is a symbol of its own: the add, which needs the two equal, and
// the mean after it stay; the gelu decomposes.
// CHECK-LABEL: func.func @unnamed
// CHECK-SAME: {thunder.dims = ["_d0_0", "8"]}
// CHECK-SAME: {thunder.dims = ["_d1_0", "8"]}
// CHECK: "thunder.erf"
// CHECK: "ltorch.add"
// CHECK: "ltorch.mean"
func.func @unnamed(%x: tensor<?x8xf32>, %y: tensor<?x8xf32>) -> tensor<8xf32> {
  %0 = "ltorch.gelu"(%x) {approximate = "none"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %c1 = arith.constant 1 : i64
  %1 = "ltorch.add"(%0, %y, %c1) : (tensor<?x8xf32>, tensor<?x8xf32>, i64) -> tensor<?x8xf32>
  %2 = "ltorch.mean"(%1) {dim = 0 : i64, keepdim = false, dtype} : (tensor<?x8xf32>) -> tensor<8xf32>
  return %2 : tensor<8xf32>
}

// -----

// A dim given by an expression of the symbols (math.ceil of a SymFloat keeps its expression).
// CHECK-LABEL: func.func @expression
// CHECK: "thunder.erf"
func.func @expression(%x: tensor<?x?xf32> {thunder.dims = ["T", "math.ceil(T / 2)"]}) -> tensor<?x?xf32> {
  %0 = "ltorch.gelu"(%x) {approximate = "none"} : (tensor<?x?xf32>) -> tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}
