// RUN: thunder-opt %s --mlir-print-debuginfo | filecheck %s
// --mlir-print-debuginfo prints each op's source location (line:column of the op in this file).

// CHECK-LABEL: func.func @computation
// CHECK: "ltorch.mul"(%arg0, %arg1) : (tensor<3xi32>, tensor<3xf32>) -> tensor<3xf32> loc(#[[L:loc[0-9]*]])
// CHECK: return %{{.*}} loc(#[[R:loc[0-9]*]])
// CHECK-DAG: #[[L]] = loc({{.*}}:[[# @LINE + 3]]:8)
// CHECK-DAG: #[[R]] = loc({{.*}}:[[# @LINE + 3]]:3)
func.func @computation(%a: tensor<3xi32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  %0 = "ltorch.mul"(%a, %b) : (tensor<3xi32>, tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
