// RUN: not thunder-opt %s --split-input-file 2>&1 | filecheck %s
// Prims do not broadcast: thunder.add needs equal shapes, and broadcast_in_dim must map each input
// dim onto an output dim of the same size (or 1).

// CHECK: error: 'thunder.add' op invalid operands: prims take tensors of one shape, got [(2, 3), (3, 2)]
func.func @add(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>) -> tensor<2x3xf32> {
  %0 = "thunder.add"(%a, %b) : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// CHECK: error: 'thunder.broadcast_in_dim' op invalid operands: cannot broadcast dim 0 of size 3 to 2
func.func @bcast(%a: tensor<3xf32>) -> tensor<2x3xf32> {
  %0 = "thunder.broadcast_in_dim"(%a) {broadcast_dims = array<i64: 0>, shape = array<i64: 2, 3>} : (tensor<3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
