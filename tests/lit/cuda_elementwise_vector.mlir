// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-fuse{policy=always})' --to-gpu | filecheck %s
// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-fuse{policy=always})' --to-ptx=sm_80 | filecheck %s --check-prefix=PTX
// bias + tanh on CUDA tensors: a 1-D grid, each thread computes 4 consecutive f32 (16 bytes):
// one vector load of x, the bias read at column index (a broadcast: scalar loads), one vector
// store; loads are clamped into range (n - 4), only the store is guarded.
// A column sum (a reduction over the rows, like a bias gradient; a region of its own here): a
// thread per output column looping over the rows, accumulating in f64 (one result's terms are
// added one by one: f32 would be less accurate than eager's partial sums).

// CHECK: gpu.func @fusion_0_k0(
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-SAME: thunder.launch = "elementwise: n = 2 leading dim(s) of output 0, 1024 per block of 256 threads, vector 4"
// CHECK: %[[LAST:.*]] = arith.subi %n, %{{.*}} : i64
// CHECK: %[[FIRST:.*]] = arith.minsi %{{.*}}, %[[LAST]] : i64
// CHECK: llvm.load %{{.*}} {alignment = 16 : i64} : !llvm.ptr<1> -> vector<4xf32>
// CHECK-COUNT-4: llvm.extractelement
// CHECK: llvm.insertelement
// CHECK: scf.if
// CHECK-NEXT: llvm.store %{{.*}} {alignment = 16 : i64} : vector<4xf32>, !llvm.ptr<1>

// CHECK: gpu.func @fusion_1_k0(
// CHECK-SAME: thunder.launch = "loops: n = 1 leading dim(s) of output 0, 256 per block of 256 threads"
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (f64) : i64

// PTX: .target sm_80
// PTX: .visible .entry fusion_0_k0(
// PTX: ld.global.nc.v4.{{[bf]}}32
// PTX: st.global.v4.{{[bf]}}32
// PTX: .visible .entry fusion_1_k0(
// PTX: add.rn.f64
func.func @bias_tanh(%x: tensor<64x96xf32, "cuda:0">, %b: tensor<96xf32, "cuda:0">) -> (tensor<64x96xf32, "cuda:0">, tensor<96xf32, "cuda:0">) {
  %0 = "thunder.broadcast_in_dim"(%b) {broadcast_dims = array<i64: 1>, shape = array<i64: 64, 96>} : (tensor<96xf32, "cuda:0">) -> tensor<64x96xf32, "cuda:0">
  %1 = "thunder.add"(%x, %0) : (tensor<64x96xf32, "cuda:0">, tensor<64x96xf32, "cuda:0">) -> tensor<64x96xf32, "cuda:0">
  %2 = "thunder.tanh"(%1) : (tensor<64x96xf32, "cuda:0">) -> tensor<64x96xf32, "cuda:0">
  %3 = "thunder.sum"(%x) {dims = array<i64: 0>} : (tensor<64x96xf32, "cuda:0">) -> tensor<96xf32, "cuda:0">
  return %2, %3 : tensor<64x96xf32, "cuda:0">, tensor<96xf32, "cuda:0">
}
