// The CUTLASS GEMMs the plugin registers, as host code sees them: each configuration (a schedule, tile and cluster
// shape, built for one arch) is a table of entry points per output dtype and b order. The .cu files instantiate
// them; the host code (cutlass_registration.cpp) needs no CUTLASS header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "gemm_call.hpp"

namespace kabi::cuda {

// One instantiation: a CUTLASS device-level GEMM for one dtype and one b order.
struct CutlassGemm {
  // Why the kernel cannot compute the call exactly (CUTLASS's can_implement, on the call's shapes and strides), or
  // "" when it can.
  std::string (*check)(const GemmCall& call);
  size_t (*workspace_bytes)(const GemmCall& call, int32_t multiprocessors);
  // Runs on call.stream; returns "" or what failed.
  std::string (*run)(const GemmCall& call, void* workspace, int32_t multiprocessors);
};

// What a configuration's instantiations compute: matmul and linear (a, b and out of one dtype, bfloat16 or float16),
// or scaled_mm (float8_e4m3fn a and b, scaled).
enum class CutlassOps : int32_t { kMatmulAndLinear, kScaledMm };

// The output dtypes, in the order of CutlassConfig::gemms' rows: KABI_DTYPE_BFLOAT16, FLOAT16, FLOAT32.
constexpr int kOutputDtypes = 3;

struct CutlassConfig {
  // e.g. "sm90.ws_cooperative.128x256x64.c2x1.persistent"
  const char* name;
  // The exact arch the code runs on (90 for sm_90a), or a range for sm_80-family code.
  int32_t arch_min, arch_max;
  bool needs_wgmma;
  CutlassOps ops;
  // [output dtype: 0 bfloat16, 1 float16, 2 float32][b order: MatrixOrder]; an entry without functions was not built.
  CutlassGemm gemms[kOutputDtypes][2];
  // scaled_mm: the mainloop keeps the tensor cores' partial sums in their narrower accumulator over the whole K loop
  // (CUTLASS's FP8FastAccum schedules), which only a call that allows it (use_fast_accum) may run.
  bool fast_accumulation = false;
};

// Every configuration this build compiled, in registration order.
const CutlassConfig* const* cutlass_configs(size_t* count);

// The CUTLASS release the kernels were built from, e.g. "4.2.1".
const char* cutlass_version();

}  // namespace kabi::cuda
