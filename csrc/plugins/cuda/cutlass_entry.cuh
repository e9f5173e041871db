// The entry points of one CUTLASS instantiation (cutlass_kernels.hpp's CutlassGemm), written once for every
// configuration of the plugin. `Gemm` supplies `Device` (a CUTLASS device-level GEMM) and
// `static typename Device::Arguments arguments(const GemmCall& call, int32_t multiprocessors)`.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "cutlass/cutlass.h"
#include "cutlass_kernels.hpp"

namespace kabi::cuda {

template <class Gemm>
struct CutlassEntry {
  using Device = typename Gemm::Device;

  static std::string check(const GemmCall& call) {
    const auto status = Device::can_implement(Gemm::arguments(call, 1));
    if (status == cutlass::Status::kSuccess) return {};
    return std::string("CUTLASS declines the shapes or strides: ") + cutlass::cutlassGetStatusString(status);
  }

  static size_t workspace_bytes(const GemmCall& call, int32_t multiprocessors) {
    return Device::get_workspace_size(Gemm::arguments(call, multiprocessors));
  }

  static std::string run(const GemmCall& call, void* workspace, int32_t multiprocessors) {
    Device gemm;
    auto stream = static_cast<cudaStream_t>(call.stream);
    cutlass::Status status = gemm.initialize(Gemm::arguments(call, multiprocessors), workspace, stream);
    if (status == cutlass::Status::kSuccess) status = gemm.run(stream);
    if (status != cutlass::Status::kSuccess) {
      const cudaError_t error = cudaGetLastError();
      return std::string(cutlass::cutlassGetStatusString(status)) + " (" + cudaGetErrorString(error) + ")";
    }
    return {};
  }

  static constexpr CutlassGemm entry() { return {&check, &workspace_bytes, &run}; }
};

}  // namespace kabi::cuda
