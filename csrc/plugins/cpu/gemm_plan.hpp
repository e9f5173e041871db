// How one matmul call maps onto CBLAS gemm calls: a[..., M, K] @ b[..., K, N] -> out[..., M, N], with the leading
// dimensions flattened into one batch stride per tensor (KABI_BATCH_UNIFORM) and each input matrix either
// row-major (CblasNoTrans) or column-major (CblasTrans), read in place.
#pragma once

#include <cstdint>
#include <string>

#include "kabi/kabi.h"

namespace kabi::cpu {

// One input matrix as gemm reads it. Strides are in elements.
struct BlasOperand {
  const char* data = nullptr;  // the first matrix (data + byte_offset)
  bool transposed = false;     // stored column-major: passed as CblasTrans
  int64_t leading_dimension = 1;
  int64_t batch_stride = 0;  // 0: the same matrix for every batch entry (broadcast)
};

struct GemmPlan {
  uint32_t dtype = 0;  // KABI_DTYPE_FLOAT32 or KABI_DTYPE_FLOAT64
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  BlasOperand a, b;
  // The output is dense row-major: leading dimension max(1, N), batch stride M * N. NULL when the call has no
  // output (selection may ask before the output exists).
  char* out = nullptr;
};

// Fill *plan for a call whose problem the core derived (its broadcast batch shape gives each tensor's batch stride,
// as kabi.h describes for KABI_BATCH_UNIFORM), or return why gemm cannot compute it exactly (the supports
// predicate's reason); the empty string means success. With require_output, a missing output is a failure;
// otherwise outputs are checked when present. Checks: two float32 or float64 CPU inputs of one dtype, rank >= 2,
// inner dimensions that agree, matrices with a unit stride in one of their last two dimensions and a valid leading
// dimension, sizes within the 32-bit BLAS interface, and an output of the right shape and dtype that is
// C-contiguous. That outputs overlap no input the core checks before every launch.
std::string plan_gemm(const kabi_problem& problem, const kabi_args& args, bool require_output, GemmPlan* plan);

}  // namespace kabi::cpu
