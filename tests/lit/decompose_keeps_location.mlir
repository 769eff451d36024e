// RUN: thunder-opt %s --mlir-print-debuginfo --pass-pipeline='builtin.module(thunder-decompose)' | filecheck %s
// The prims an ltorch op decomposes into keep the op's file location (line 10 here) under their names.

// CHECK-LABEL: func.func @computation
// CHECK: "thunder.convert_element_type"(%arg0) {dtype = f32} : (tensor<3xi32>) -> tensor<3xf32> loc(#loc{{[0-9]+}})
// CHECK: "thunder.mul"(%{{.*}}, %arg1) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32> loc(#loc{{[0-9]+}})
// CHECK: = loc({{.*}}:10:{{[0-9]+}})
// CHECK-COUNT-2: = loc("d_{{[0-9]+}}"(#loc{{[0-9]+}}))
func.func @computation(%a: tensor<3xi32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  %0 = "ltorch.mul"(%a, %b) : (tensor<3xi32>, tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
