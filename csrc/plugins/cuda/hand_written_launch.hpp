// Queuing one of the plugin's hand-written kernels (the split-K GEMV, the decode MMA kernel): what their launches
// share between planning a call and queuing its kernels.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "gemm_plan.hpp"
#include "kabi/kabi.h"
#include "plugin_context.hpp"

namespace kabi::cuda {

// Checks that the host gave the workspace the call needs (`needed` bytes; none when 0), makes the call's device
// current and runs `queue()`, which queues the kernels on the call's stream and returns the launches' error. Each
// failure becomes a status whose message names the kernel (`name`) and why.
template <class Queue>
kabi_status queue_on_device(const std::string& name, const GemmCall& call, const kabi_args& args, size_t needed,
                            Queue&& queue) {
  const PluginContext& context = plugin_context();
  if (needed > 0 && (args.workspace == nullptr || args.workspace_size < needed)) {
    return context.fail(KABI_STATUS_INTERNAL, name + ": a workspace of " + std::to_string(args.workspace_size) +
                                                  " bytes; it needs " + std::to_string(needed));
  }
  DeviceGuard device(call.device_index);
  if (!device.ok()) return context.fail(KABI_STATUS_UNAVAILABLE, name + ": " + device.error());
  const cudaError_t error = queue();
  if (error != cudaSuccess) {
    return context.fail(KABI_STATUS_KERNEL_FAILED, name + ": launch failed: " + cudaGetErrorString(error));
  }
  return KABI_STATUS_OK;
}

}  // namespace kabi::cuda
