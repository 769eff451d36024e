// RUN: not thunder-opt %s --split-input-file 2>&1 | filecheck %s
// A number operand is a constant or a runtime number (a value of type f64, i64 or i1, e.g. what
// ltorch.item read from a tensor); a tensor there is rejected.

// CHECK-NOT: not a constant
// CHECK: error: 'ltorch.add' op invalid operands: operand 'alpha' (Number) must be a number, not a value of type tensor<f32>
// CHECK: func.func @runtime_number
// CHECK: "ltorch.add"(%arg0, %arg1, %c1_i64) : (tensor<4xf32>, f64, i64) -> tensor<4xf32>
func.func @runtime_number(%a: tensor<4xf32>, %s: f64) -> tensor<4xf32> {
  %one = arith.constant 1 : i64
  %0 = "ltorch.add"(%a, %s, %one) : (tensor<4xf32>, f64, i64) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @tensor_as_number(%a: tensor<4xf32>, %t: tensor<f32>) -> tensor<4xf32> {
  %0 = "ltorch.add"(%a, %a, %t) : (tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
