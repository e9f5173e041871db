// Registering the plugin's GEMM kernels (CUTLASS and cuBLASLt alike) through the host table: the descriptor fields
// they all share, and the hand-over of a kernel's state to the host.
#pragma once

#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "gemm_plan.hpp"
#include "kabi/kabi.h"
#include "plugin_context.hpp"

namespace kabi::cuda {

// A kernel descriptor for one GEMM op with what every kernel of this plugin shares: CUDA, the op's layouts (a and b
// row- or column-major, linear's bias possibly "general", which supports() then declines by name), 16-byte
// alignment, batches for matmul and linear but not scaled_mm, and the callbacks. The caller adds what differs:
// archs, required features, priority, dtypes and type constraints. name and fingerprint must outlive the
// registration (the kernel's own strings do).
inline kabi_kernel_desc gemm_kernel_desc(GemmOp op, const std::string& name, const std::string& fingerprint,
                                         kabi_kernel_fn function, kabi_supports_fn supports,
                                         kabi_workspace_fn workspace) {
  kabi_kernel_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.op = op_name(op);
  desc.name = name.c_str();
  desc.backend = "cuda";
  desc.device_type = kDLCUDA;
  desc.layouts = KABI_LAYOUT_CONTIGUOUS | KABI_LAYOUT_ROW_STRIDED | KABI_LAYOUT_COL_STRIDED |
                 (op == GemmOp::kLinear ? KABI_LAYOUT_GENERAL : 0u);
  desc.alignment = 16;
  desc.batch_mode = op == GemmOp::kScaledMm ? KABI_BATCH_NONE : KABI_BATCH_UNIFORM;
  desc.kind = KABI_KERNEL_FUNCTION;
  desc.function = function;
  desc.supports = supports;
  desc.workspace = workspace;
  desc.fingerprint = fingerprint.c_str();
  return desc;
}

// The kabi_kernel_fn of a kernel whose `launch(kernel, problem, args)` queues a call and returns its status (failing
// through plugin_context().fail): a NULL problem or args, and an exception, become errors naming the kernel.
template <class Kernel, kabi_status (*launch)(const Kernel&, const kabi_problem&, const kabi_args&)>
kabi_status run_guarded(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  const auto& kernel = *static_cast<const Kernel*>(user_data);
  const PluginContext& context = plugin_context();
  try {
    if (problem == nullptr || args == nullptr) {
      return context.fail(KABI_STATUS_INVALID_ARGUMENT, kernel.name + ": problem or args is NULL");
    }
    return launch(kernel, *problem, *args);
  } catch (const std::exception& error) {
    return context.fail(KABI_STATUS_INTERNAL, kernel.name + ": " + error.what());
  }
}

// The kabi_supports_fn of a kernel whose `why_not(kernel, problem, args)` says why it cannot compute a call ("" when
// it can): that text, or an exception's, is the reason.
template <class Kernel, std::string (*why_not)(const Kernel&, const kabi_problem&, const kabi_args&)>
int32_t supports_unless(void* user_data, const kabi_problem* problem, const kabi_args* args, char* reason,
                        size_t reason_size) {
  try {
    const std::string text = why_not(*static_cast<const Kernel*>(user_data), *problem, *args);
    if (text.empty()) return 1;
    std::snprintf(reason, reason_size, "%s", text.c_str());
  } catch (const std::exception& error) {
    std::snprintf(reason, reason_size, "%s", error.what());
  }
  return 0;
}

// Register desc with kernel as its user data; on success the host owns the kernel and frees it when the kernel is
// unregistered, on failure it is freed here.
template <class Kernel>
kabi_status register_gemm_kernel(const kabi_host_api* host, kabi_kernel_desc desc, std::unique_ptr<Kernel> kernel) {
  desc.user_data = kernel.get();
  desc.user_data_free = [](void* user_data) { delete static_cast<Kernel*>(user_data); };
  kabi_kernel registered = nullptr;
  const kabi_status status = host->kernel_register(&desc, &registered);
  if (status == KABI_STATUS_OK) kernel.release();
  return status;
}

}  // namespace kabi::cuda
