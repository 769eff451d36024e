// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-fuse{policy=always})' | filecheck %s --check-prefix=FUSE
// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-fuse{policy=always})' --to-gpu | filecheck %s
// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-fuse{policy=always executors=linalg})' | filecheck %s --check-prefix=CPU-ONLY
// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-fuse{policy=always})' --to-ptx=sm_90 | filecheck %s --check-prefix=PTX
// RUN: thunder-opt %s --pass-pipeline='builtin.module(thunder-fuse{policy=always})' --to-ptx --mlir-print-ir-after-all 2>&1 >/dev/null | filecheck %s --check-prefix=NVVM
// Layer norm on CUDA tensors (rows of 256): the cuda executor claims the region; one block of
// 64 threads per row, each thread loads one 16-byte chunk of the row (columns 4*lane .. 4*lane+3:
// consecutive threads read consecutive chunks) once, with one vector load, and keeps it in
// registers for both reductions (gpu.all_reduce: warp shuffles) and the output, which it writes
// with one vector store. The row count is the kernel argument %n: the kernel does not depend on
// the first dim.

// CPU-ONLY-NOT: thunder.executor
// FUSE: func.func private @fusion_0({{.*}}tensor<8x256xf32, "cuda:0">{{.*}} attributes {thunder.executor = "cuda"}

// CHECK-LABEL: gpu.module @kernels
// CHECK: gpu.func @fusion_0_k0(%in0: !llvm.ptr<1> {llvm.noalias, llvm.readonly}, %in1: !llvm.ptr<1> {{.*}}, %in2: !llvm.ptr<1> {{.*}}, %out0: !llvm.ptr<1> {llvm.noalias}, %n: i64) kernel
// CHECK-SAME: known_block_size = array<i32: 64, 1, 1>
// CHECK-SAME: thunder.launch = "rows: n = 1 leading dim(s) of output 0, 1 per block of 64 threads, vector 4"
// CHECK: %[[LANE:.*]] = arith.index_cast %{{.*}} : index to i64
// CHECK: %[[COL:.*]] = arith.muli %[[LANE]], %{{.*}} : i64
// CHECK: llvm.load %{{.*}} {alignment = 16 : i64} : !llvm.ptr<1> -> vector<4xf32>
// CHECK-COUNT-4: llvm.extractelement
// CHECK: gpu.all_reduce add
// CHECK-NOT: llvm.load
// CHECK: gpu.all_reduce add
// CHECK: math.sqrt
// CHECK: llvm.getelementptr %in1[%[[COL]]]
// CHECK: llvm.store %{{.*}} : vector<4xf32>, !llvm.ptr<1>
// CHECK-NOT: scf.if
// CHECK: gpu.return

// PTX: // fusion_0: PTX for sm_90
// PTX: // launch fusion_0_k0: rows: n = 1 leading dim(s) of output 0, 1 per block of 64 threads, vector 4
// PTX: .target sm_90
// PTX: .visible .entry fusion_0_k0(
// PTX: ld.global.nc.v4.{{[bf]}}32
// PTX-NOT: ld.global.nc.{{[bf]}}32
// PTX: shfl.sync.bfly.b32
// PTX: bar.sync
// PTX: sqrt.rn.f32
// PTX: st.global.v4.{{[bf]}}32
// PTX-NOT: call
// PTX: ret;

// NVVM: IR Dump After ConvertGpuOpsToNVVMOps
// NVVM: llvm.func @fusion_0_k0(
// NVVM-SAME: nvvm.kernel
// NVVM: nvvm.shfl.sync bfly
// NVVM: nvvm.barrier
func.func @ln(%arg0: tensor<8x256xf32, "cuda:0">, %arg1: tensor<256xf32, "cuda:0">, %arg2: tensor<256xf32, "cuda:0">) -> tensor<8x256xf32, "cuda:0"> {
  %0 = "ltorch.layer_norm"(%arg0, %arg1, %arg2) {eps = 1.000000e-05 : f64, normalized_shape = array<i64: 256>, operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<8x256xf32, "cuda:0">, tensor<256xf32, "cuda:0">, tensor<256xf32, "cuda:0">) -> tensor<8x256xf32, "cuda:0">
  return %0 : tensor<8x256xf32, "cuda:0">
}
