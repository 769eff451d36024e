// RUN: thunder-opt %s | filecheck %s
// thunder prims (broadcast_in_dim, convert_element_type, slice, reshape, transpose, sum, full, iota,
// where, take, cat, uniform) verify and round-trip.

// CHECK-LABEL: func.func @prims
// CHECK-SAME: (%[[A:.*]]: tensor<3xf32>, %[[B:.*]]: tensor<2x3xf16>, %[[I:.*]]: tensor<2xi64>)
// CHECK: %[[BA:.*]] = "thunder.broadcast_in_dim"(%[[A]]) {broadcast_dims = array<i64: 1>, shape = array<i64: 2, 3>} : (tensor<3xf32>) -> tensor<2x3xf32>
// CHECK: %[[CB:.*]] = "thunder.convert_element_type"(%[[B]]) {dtype = f32} : (tensor<2x3xf16>) -> tensor<2x3xf32>
// CHECK: %[[ADD:.*]] = "thunder.add"(%[[BA]], %[[CB]]) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK: %[[SL:.*]] = "thunder.slice"(%[[ADD]]) {end_indices = array<i64: 2, 3>, start_indices = array<i64: 0, 1>, strides = array<i64: 1, 2>} : (tensor<2x3xf32>) -> tensor<2x1xf32>
// CHECK: %[[RS:.*]] = "thunder.reshape"(%[[ADD]]) {shape = array<i64: 3, 2>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK: %[[TR:.*]] = "thunder.transpose"(%[[RS]]) {permutation = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
// CHECK: %[[SUM:.*]] = "thunder.sum"(%[[TR]]) {dims = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<f32>
// CHECK: %[[F:.*]] = "thunder.full"(%{{.*}}) {device = "cpu", dtype = f32, shape = array<i64: 2, 3>} : (f64) -> tensor<2x3xf32>
// CHECK: %[[IO:.*]] = "thunder.iota"() {device = "cpu", dtype = i64, length = 3 : i64, start = 0 : i64, step = 1 : i64} : () -> tensor<3xi64>
// CHECK: %[[LT:.*]] = "thunder.lt"(%[[ADD]], %[[F]]) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
// CHECK: %[[W:.*]] = "thunder.where"(%[[LT]], %[[ADD]], %{{.*}}) : (tensor<2x3xi1>, tensor<2x3xf32>, f64) -> tensor<2x3xf32>
// CHECK: %[[TK:.*]] = "thunder.take"(%[[W]], %[[I]]) {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<2x2xf32>
// CHECK: %[[CAT:.*]] = "thunder.cat"(%[[W]], %[[TK]]) {dim = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, {{.*}}>} : (tensor<2x3xf32>, tensor<2x2xf32>) -> tensor<2x5xf32>
// CHECK: %[[U:.*]] = "thunder.uniform"() {device = "cpu", dtype = f32, high = 1.000000e+00 : f64, low = 0.000000e+00 : f64, shape = array<i64: 4>} : () -> tensor<4xf32>
// CHECK: return %[[SL]], %[[SUM]], %[[IO]], %[[CAT]], %[[U]]
func.func @prims(%a: tensor<3xf32>, %b: tensor<2x3xf16>, %i: tensor<2xi64>) -> (tensor<2x1xf32>, tensor<f32>, tensor<3xi64>, tensor<2x5xf32>, tensor<4xf32>) {
  %0 = "thunder.broadcast_in_dim"(%a) {broadcast_dims = array<i64: 1>, shape = array<i64: 2, 3>} : (tensor<3xf32>) -> tensor<2x3xf32>
  %1 = "thunder.convert_element_type"(%b) {dtype = f32} : (tensor<2x3xf16>) -> tensor<2x3xf32>
  %2 = "thunder.add"(%0, %1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = "thunder.slice"(%2) {end_indices = array<i64: 2, 3>, start_indices = array<i64: 0, 1>, strides = array<i64: 1, 2>} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  %4 = "thunder.reshape"(%2) {shape = array<i64: 3, 2>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %5 = "thunder.transpose"(%4) {permutation = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %6 = "thunder.sum"(%5) {dims = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<f32>
  %zero = arith.constant 0.0 : f64
  %7 = "thunder.full"(%zero) {device = "cpu", dtype = f32, shape = array<i64: 2, 3>} : (f64) -> tensor<2x3xf32>
  %8 = "thunder.iota"() {device = "cpu", dtype = i64, length = 3 : i64, start = 0 : i64, step = 1 : i64} : () -> tensor<3xi64>
  %9 = "thunder.lt"(%2, %7) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
  %10 = "thunder.where"(%9, %2, %zero) : (tensor<2x3xi1>, tensor<2x3xf32>, f64) -> tensor<2x3xf32>
  %11 = "thunder.take"(%10, %i) {dim = 1 : i64} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<2x2xf32>
  %12 = "thunder.cat"(%10, %11) {dim = 1 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x3xf32>, tensor<2x2xf32>) -> tensor<2x5xf32>
  %13 = "thunder.uniform"() {device = "cpu", dtype = f32, high = 1.0 : f64, low = 0.0 : f64, shape = array<i64: 4>} : () -> tensor<4xf32>
  return %3, %6, %8, %12, %13 : tensor<2x1xf32>, tensor<f32>, tensor<3xi64>, tensor<2x5xf32>, tensor<4xf32>
}
