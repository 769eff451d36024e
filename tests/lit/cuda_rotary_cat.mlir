// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-fuse{policy=always})' --to-gpu | filecheck %s
// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-fuse{policy=always})' --to-ptx=sm_90 | filecheck %s --check-prefix=PTX
// A Llama rotary embedding on CUDA tensors (bf16): x * cos + cat(-x2, x1) * sin. The cat is not
// written to memory: each element selects the part its column falls in (arith.select), each
// part read at its column clamped into it, so every load stays inside x. The bf16 intermediates
// are f32 (lowering/linalg/bf16_intermediates.py): the select is on f32, one rounding at the store.

// CHECK: gpu.func @fusion_0_k0(
// CHECK-SAME: thunder.launch = "elementwise: n = 4 leading dim(s) of output 0
// CHECK: arith.cmpi sge
// CHECK: arith.maxsi
// CHECK: arith.select
// CHECK: llvm.store

// PTX: .target sm_90
// PTX: .visible .entry fusion_0_k0(
// PTX: selp.f32
// PTX: cvt.rn.bf16x2.f32
// PTX: st.global.v4.b32
func.func @rotary(%x: tensor<2x8x16x64xbf16, "cuda:0">, %cos: tensor<16x64xbf16, "cuda:0">, %sin: tensor<16x64xbf16, "cuda:0">) -> tensor<2x8x16x64xbf16, "cuda:0"> {
  %0 = "thunder.slice"(%x) {start_indices = array<i64: 0, 0, 0, 0>, end_indices = array<i64: 2, 8, 16, 32>, strides = array<i64: 1, 1, 1, 1>} : (tensor<2x8x16x64xbf16, "cuda:0">) -> tensor<2x8x16x32xbf16, "cuda:0">
  %1 = "thunder.slice"(%x) {start_indices = array<i64: 0, 0, 0, 32>, end_indices = array<i64: 2, 8, 16, 64>, strides = array<i64: 1, 1, 1, 1>} : (tensor<2x8x16x64xbf16, "cuda:0">) -> tensor<2x8x16x32xbf16, "cuda:0">
  %2 = "thunder.neg"(%1) : (tensor<2x8x16x32xbf16, "cuda:0">) -> tensor<2x8x16x32xbf16, "cuda:0">
  %3 = "thunder.cat"(%2, %0) {dim = 3 : i64, operandSegmentSizes = array<i32: 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x8x16x32xbf16, "cuda:0">, tensor<2x8x16x32xbf16, "cuda:0">) -> tensor<2x8x16x64xbf16, "cuda:0">
  %4 = "thunder.broadcast_in_dim"(%cos) {broadcast_dims = array<i64: 2, 3>, shape = array<i64: 2, 8, 16, 64>} : (tensor<16x64xbf16, "cuda:0">) -> tensor<2x8x16x64xbf16, "cuda:0">
  %5 = "thunder.mul"(%x, %4) : (tensor<2x8x16x64xbf16, "cuda:0">, tensor<2x8x16x64xbf16, "cuda:0">) -> tensor<2x8x16x64xbf16, "cuda:0">
  %6 = "thunder.broadcast_in_dim"(%sin) {broadcast_dims = array<i64: 2, 3>, shape = array<i64: 2, 8, 16, 64>} : (tensor<16x64xbf16, "cuda:0">) -> tensor<2x8x16x64xbf16, "cuda:0">
  %7 = "thunder.mul"(%3, %6) : (tensor<2x8x16x64xbf16, "cuda:0">, tensor<2x8x16x64xbf16, "cuda:0">) -> tensor<2x8x16x64xbf16, "cuda:0">
  %8 = "thunder.add"(%5, %7) : (tensor<2x8x16x64xbf16, "cuda:0">, tensor<2x8x16x64xbf16, "cuda:0">) -> tensor<2x8x16x64xbf16, "cuda:0">
  return %8 : tensor<2x8x16x64xbf16, "cuda:0">
}
