// RUN: not thunder-opt %s 2>&1 | filecheck %s
// Number operands must be arith.constant values: a scalar function argument is rejected.

// CHECK: error: 'ltorch.add' op invalid operands: not a constant
func.func @computation(%a: tensor<4xf32>, %s: f64) -> tensor<4xf32> {
  %one = arith.constant 1 : i64
  %0 = "ltorch.add"(%a, %s, %one) : (tensor<4xf32>, f64, i64) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
