// The list of CUTLASS configurations this build compiled (one translation unit each, so they build in parallel).
#include "cutlass/version.h"
#include <string>

#include "cutlass_grouped_kernels.hpp"
#include "cutlass_kernels.hpp"

namespace kabi::cuda {

extern const CutlassConfig kSm90Cooperative128x256;
extern const CutlassConfig kSm90Pingpong128x128;
extern const CutlassConfig kSm90StreamK128x128;
extern const CutlassConfig kSm80Multistage128x128;
extern const CutlassConfig kSm90Fp8Cooperative128x128;
extern const CutlassConfig kSm90Fp8Pingpong64x128;
extern const CutlassConfig kSm90Fp8FastAccumCooperative128x256;
extern const CutlassConfig kSm90Fp8FastAccumPingpong128x128;
extern const CutlassGroupedConfig kSm90GroupedPingpong64x256;
extern const CutlassGroupedConfig kSm90GroupedCooperative128x256;
extern const CutlassGroupedConfig kSm90GroupedCooperative128x128;

const CutlassConfig* const* cutlass_configs(size_t* count) {
  static const CutlassConfig* const kConfigs[] = {&kSm90Cooperative128x256,
                                                  &kSm90Pingpong128x128,
                                                  &kSm90StreamK128x128,
                                                  &kSm80Multistage128x128,
                                                  &kSm90Fp8Cooperative128x128,
                                                  &kSm90Fp8Pingpong64x128,
                                                  &kSm90Fp8FastAccumCooperative128x256,
                                                  &kSm90Fp8FastAccumPingpong128x128};
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

const CutlassGroupedConfig* const* cutlass_grouped_configs(size_t* count) {
  // Same arch, same priority: where nothing was tuned, selection's heuristic takes the first registered, the ping-pong
  // 64-row tiles, which waste the fewest rows on MoE routings (cutlass_sm90_grouped_pingpong.cu).
  static const CutlassGroupedConfig* const kConfigs[] = {&kSm90GroupedPingpong64x256, &kSm90GroupedCooperative128x256,
                                                         &kSm90GroupedCooperative128x128};
  *count = sizeof(kConfigs) / sizeof(kConfigs[0]);
  return kConfigs;
}

const char* cutlass_version() {
  static const std::string version = std::to_string(CUTLASS_MAJOR) + "." + std::to_string(CUTLASS_MINOR) + "." +
                                     std::to_string(CUTLASS_PATCH);
  return version.c_str();
}

}  // namespace kabi::cuda
