// RUN: not thunder-opt %s --split-input-file 2>&1 | filecheck %s
// Attributes are decoded by parameter kind: a string where an int dim is expected, or a float
// where an int array is expected, or a string where a dtype (type attribute) is expected, is rejected.

// CHECK: error: 'ltorch.transpose' op invalid operands: Cannot cast attribute to IntegerAttr (from Attribute("zero"))
func.func @string_for_int(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %0 = "ltorch.transpose"(%a) {dim0 = "zero", dim1 = 1 : i64} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

// CHECK: error: 'thunder.reshape' op invalid operands: Cannot cast attribute to IntegerAttr
func.func @float_for_ints(%a: tensor<2x3xf32>) -> tensor<6xf32> {
  %0 = "thunder.reshape"(%a) {shape = 6.0 : f64} : (tensor<2x3xf32>) -> tensor<6xf32>
  return %0 : tensor<6xf32>
}

// -----

// CHECK: error: 'thunder.convert_element_type' op invalid operands: Cannot cast attribute to TypeAttr (from Attribute("f32"))
func.func @string_for_dtype(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "thunder.convert_element_type"(%a) {dtype = "f32"} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
