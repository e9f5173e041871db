// The grouped_mm op on the CPU: one OpenBLAS gemm per group. 2-D x 3-D: out[T, N] with group g's rows of x[T, K]
// (cumulative end offsets offs[E], int32) times w[g] ([K, N], or the transposed view of an nn.Linear [N, K] weight,
// read in place), rows past the last offset zero. 3-D x 3-D: out[g] = x[g] @ w[g]. float32 and float64.
#pragma once

#include "kabi/kabi.h"
#include "openblas_library.hpp"

namespace kabi::cpu {

inline constexpr const char* kGroupedMmKernelName = "cpu.openblas.grouped_mm";

// Register cpu.openblas.grouped_mm for the op "grouped_mm" through host->kernel_register, computing with blas (copied;
// its functions stay valid for the life of the process). Returns the host's status.
kabi_status register_grouped_mm_kernels(const kabi_host_api& host, const OpenBlas& blas);

}  // namespace kabi::cpu
