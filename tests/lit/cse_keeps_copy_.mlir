// RUN: thunder-opt %s --pass-pipeline='builtin.module(cse,canonicalize)' | filecheck %s
// copy_ writes memory (not Pure): canonicalize keeps it although its result is unused.

// CHECK-LABEL: func.func @computation
// CHECK: "ltorch.copy_"(%arg1, %arg0)
func.func @computation(%x: tensor<2xf32>, %buf: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "ltorch.copy_"(%buf, %x) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %x : tensor<2xf32>
}
