// kabi-cuda: the built-in CUDA plugin. CUTLASS GEMMs (sm_90a warp-specialized, sm_80 multistage) and cuBLASLt's
// heuristic algorithms for matmul and linear in bfloat16 and float16, CUTLASS's sm_90a grouped GEMMs for grouped_mm,
// and a split-K GEMV for few rows, registered only through the host table that kabi_plugin_init receives, as a
// vendor's plugin would (this library does not link libkabi). Kernels are registered only for the devices present: on
// a machine without a CUDA device or driver the plugin loads and registers nothing.
#include <dlfcn.h>

#include <cstddef>
#include <exception>
#include <string>

#include "kabi/kabi.h"
#include "plugin_context.hpp"

namespace kabi::cuda {
namespace {

constexpr const char* kPluginName = "kabi-cuda";

// The directory this plugin was loaded from, to find a cuBLASLt installed beside kabi.
std::string plugin_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&plugin_context), &info) == 0 || info.dli_fname == nullptr) return {};
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

kabi_status initialize(const kabi_host_api* host, kabi_plugin_info* out_info) {
  if (out_info != nullptr && out_info->struct_size >= offsetof(kabi_plugin_info, version) + sizeof(const char*)) {
    out_info->name = kPluginName;
    out_info->version = KABI_CUDA_PLUGIN_VERSION;
  }
  // set_error is the last field this plugin uses; without it no failure could be explained.
  if (host == nullptr || host->struct_size < offsetof(kabi_host_api, set_error) + sizeof(host->set_error) ||
      host->set_error == nullptr || host->kernel_register == nullptr || host->device_count == nullptr ||
      host->device_info_get == nullptr) {
    return KABI_STATUS_ABI_MISMATCH;
  }
  PluginContext& context = plugin_context();
  context.set_error = host->set_error;
  if (KABI_ABI_VERSION_MAJOR_OF(host->abi_version) != KABI_ABI_VERSION_MAJOR) {
    return context.fail(KABI_STATUS_ABI_MISMATCH,
                        std::string(kPluginName) + ": built for ABI major " + std::to_string(KABI_ABI_VERSION_MAJOR) +
                            ", host has " + std::to_string(KABI_ABI_VERSION_MAJOR_OF(host->abi_version)));
  }
  // The host's view of the devices (no driver means zero devices, not an error).
  int32_t count = 0;
  const kabi_status counted = host->device_count(kDLCUDA, &count);
  if (counted != KABI_STATUS_OK) return counted;
  if (count == 0) return KABI_STATUS_OK;
  context.archs.assign(static_cast<size_t>(count), 0);
  context.multiprocessors.assign(static_cast<size_t>(count), 0);
  for (int32_t index = 0; index < count; ++index) {
    kabi_device_info info{};
    info.struct_size = sizeof(info);
    const kabi_status status = host->device_info_get(kDLCUDA, index, &info);
    if (status != KABI_STATUS_OK) return status;
    context.archs[static_cast<size_t>(index)] = info.arch;
    context.multiprocessors[static_cast<size_t>(index)] = info.compute_units;
  }
  context.plugin_directory = plugin_directory();
  kabi_status status = register_cutlass_kernels(host, context);
  if (status == KABI_STATUS_OK) status = register_cutlass_grouped_kernels(host, context);
  if (status == KABI_STATUS_OK) status = register_split_k_gemv_kernels(host, context);
  if (status == KABI_STATUS_OK) status = register_decode_mma_kernels(host, context);
  if (status != KABI_STATUS_OK) return status;
  return register_cublaslt_kernels(host, context);
}

}  // namespace

PluginContext& plugin_context() {
  static PluginContext context;
  return context;
}

}  // namespace kabi::cuda

extern "C" {

KABI_DEFINE_PLUGIN_ABI_VERSION()

KABI_PLUGIN_EXPORT kabi_status kabi_plugin_init(const kabi_host_api* host, kabi_plugin_info* out_info) {
  try {
    return kabi::cuda::initialize(host, out_info);
  } catch (const std::exception& error) {
    if (host != nullptr && host->set_error != nullptr) host->set_error(error.what());
    return KABI_STATUS_INTERNAL;
  }
}

}  // extern "C"
