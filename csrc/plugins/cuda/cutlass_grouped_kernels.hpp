// The CUTLASS grouped GEMMs the plugin registers for grouped_mm, as host code sees them: one product per group,
//   out[rows of g] = x[rows of g] @ w[g]
// in the 2-D form (x [T, K], the groups' rows given by int32 end offsets on the device, rows past the last offset
// zero) or the 3-D form (x [E, M, K], M rows per group, no offsets). Each configuration (a schedule, tile and cluster
// shape, built for sm_90a) is a table of entry points per dtype and w order; the .cu files instantiate them, and the
// host code (cutlass_grouped_registration.cpp) needs no CUTLASS header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "gemm_call.hpp"

namespace kabi::cuda {

// Strides are in elements. The rows of group g start at x + g * x_group_stride + start_g * x_row_stride, where
// start_g is 0 in the 3-D form and the previous group's clamped end offset in the 2-D form; the same holds for out
// with out_group_stride and N.
struct GroupedGemmCall {
  uint32_t dtype = 0;  // x's, w's and out's KABI_DTYPE_*: bfloat16 or float16
  int64_t groups = 0;  // E
  int64_t rows = 0;    // T in the 2-D form, M (each group's rows) in the 3-D form
  int64_t n = 0, k = 0;
  const void* x = nullptr;
  int64_t x_row_stride = 0, x_group_stride = 0;
  // w [E, K, N]: row-major (unit stride along N) or column-major, the transposed view of an nn.Linear [E, N, K]
  // weight (unit stride along K); w_leading_dimension steps between rows of K (row-major) or columns of N.
  const void* w = nullptr;
  MatrixOrder w_order = MatrixOrder::kColumnMajor;
  int64_t w_leading_dimension = 0, w_group_stride = 0;
  // The 2-D form's offsets (E int32 values on the device, contiguous); NULL in the 3-D form.
  const int32_t* offsets = nullptr;
  void* out = nullptr;  // dense; NULL while selecting before the output exists
  int64_t out_group_stride = 0;
  int32_t device_index = 0;
  void* stream = nullptr;  // a cudaStream_t
};

// One instantiation: a CUTLASS grouped GEMM (ptr-array, grouped problem shapes read on the device) for one dtype and
// one w order, with the setup kernel that prepares its per-group arguments.
struct CutlassGroupedGemm {
  // Why CUTLASS cannot run the call (can_implement, which has no per-group shapes to check: they exist only on the
  // device), or "" when it can.
  std::string (*check)(const GroupedGemmCall& call, int32_t multiprocessors);
  // The workspace the call needs: the per-group arguments the setup kernel writes, then CUTLASS's own (a TMA
  // descriptor per operand and multiprocessor). From shapes only, as a workspace function sees them.
  size_t (*workspace_bytes)(const GroupedGemmCall& call, int32_t multiprocessors);
  // Queues the setup kernel and the grouped GEMM on call.stream; returns "" or what failed.
  std::string (*run)(const GroupedGemmCall& call, void* workspace, int32_t multiprocessors);
};

struct CutlassGroupedConfig {
  // e.g. "sm90.grouped.ws_cooperative.128x256x64.c1x2.persistent"
  const char* name;
  // [dtype: 0 bfloat16, 1 float16][w order: MatrixOrder]
  CutlassGroupedGemm gemms[2][2];
};

// Every grouped configuration this build compiled, in registration order.
const CutlassGroupedConfig* const* cutlass_grouped_configs(size_t* count);

}  // namespace kabi::cuda
